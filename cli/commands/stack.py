"""``vlgate stack up|down|status|restart``: the real deployment's topology on this machine,
without Docker (``cli/stack.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vlgate.cli.commands.base import Answer, Command, UserError


class Stack(Command):
    name = "stack"
    help = "start (up), stop (down), show (status) or restart one process of the real deployment on this machine, without Docker"
    description = (
        "up: start on --host (127.0.0.1), under --dir, MLflow and a Prefect server on PostgreSQL (--postgres, or a throw-away "
        "initdb cluster in --dir), the work pool vlgate-gpu with the deployments of infra/prefect.yaml (prefect deploy), "
        "--workers process workers (one flow each) and `vlgate serve --no-drift` sending every new version to the pool; "
        "MLflow runs its basic-auth app (an admin, the service account vlgate, a read-only account) and Prefect its auth "
        "string, their secrets generated into 0600 files in --dir (--no-auth: none, for a throw-away stack on loopback); "
        "print where each UI is. down: stop everything up started (--purge: and drop its databases and folder). "
        "status: what is running, and any secret file others may read. restart NAME: stop and start one process "
        "(serve: with the webhook secret vlgate.yaml names now). infra/README.md describes the topology and the accounts."
    )
    json_help = "the stack's state as one JSON object (no secrets)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("up", "down", "status", "restart"))
        parser.add_argument("process", nargs="?", metavar="NAME", help="restart: the process (serve, mlflow, prefect-server, worker-K)")
        parser.add_argument("--dir", metavar="DIR", help="the stack's folder: logs, state, secrets, artifacts, throw-away cluster (default: $VLGATE_HOME/stack)")
        parser.add_argument("--workers", type=int, default=2, metavar="N", help="up: process workers on the pool, one validation each at a time (default 2)")
        parser.add_argument("--postgres", metavar="URL", help="up: a PostgreSQL cluster to create the stack's databases on, postgresql://USER@HOST:PORT (default: a throw-away one)")
        parser.add_argument("--host", default="127.0.0.1", metavar="ADDRESS", help="up: the address MLflow and Prefect bind to (default 127.0.0.1; another one needs authentication)")
        parser.add_argument("--no-auth", action="store_true", help="up: no authentication on MLflow and Prefect, for a throw-away local stack (refused with a --host other than loopback)")
        parser.add_argument("--purge", action="store_true", help="down: also drop the stack's databases and remove its folder")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.processes import StackError, alive
        from vlgate.cli.stack import LocalStack
        from vlgate.cli.stack_state import describe, exposure_problem, loose_secret_files, state_json

        if args.action == "up":  # before anything is read or started
            problem = exposure_problem(args.host, auth=not args.no_auth)
            if problem:
                raise UserError(problem)
        if (args.action == "restart") != (args.process is not None):
            raise UserError("restart takes the process to restart (serve, mlflow, prefect-server, worker-K); no other action takes a name")
        if args.postgres is not None and not args.postgres.startswith("postgresql://"):
            raise UserError(f"--postgres {args.postgres}: expected postgresql://USER@HOST:PORT")

        from vlgate.flows.context import ServiceContext

        home = ServiceContext.open().home
        folder = Path(args.dir) if args.dir else home / "stack"
        stack = LocalStack(folder, home, echo=lambda line: print(line, file=sys.stderr))
        restarted = None
        try:
            if args.action == "up":
                state = stack.up(args.workers, args.postgres, auth=not args.no_auth, host=args.host)
            elif args.action == "down":
                state = stack.down(purge=args.purge)
            else:
                found = stack.read_state()
                if found is None:
                    raise UserError(f"no stack in {folder.resolve()}")
                if args.action == "restart":
                    restarted = stack.restart(args.process)
                    found = stack.read_state() or found
                state = found
        except StackError as error:
            raise UserError(str(error)) from None
        loose = [] if args.action == "down" else loose_secret_files(folder.resolve())
        for path, mode in loose:  # a warning, not a refusal: the stack runs; the files should be fixed
            print(f"warning: {path} holds secrets and is mode {mode:04o}, readable by others: chmod 600 {path}", file=sys.stderr)
        data = state_json(state) | {
            "action": args.action,
            "running": {p.name: alive(p.pid) for p in state.processes},
            "loose_secret_files": [{"path": str(path), "mode": f"{mode:04o}"} for path, mode in loose],
        }

        def text() -> None:
            if args.action == "down":
                print(f"stopped the stack in {state.folder}" + (" and dropped its databases" if args.purge else ""))
                return
            if restarted is not None:
                print(f"restarted {restarted.name} (pid {restarted.pid})")
                return
            for line in describe(state):
                print(line)
            if args.action == "status":
                for process in state.processes:
                    print(f"  {process.name:<15} pid {process.pid:<8} {'running' if alive(process.pid) else 'stopped'}")

        return Answer(data, text=text)
