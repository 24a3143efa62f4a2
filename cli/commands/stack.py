"""``vlgate stack up|down|status``: the real deployment's topology on this machine, without
Docker (``cli/stack.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vlgate.cli.commands.base import Answer, Command, UserError


class Stack(Command):
    name = "stack"
    help = "start (up), stop (down) or show (status) the real deployment on this machine, without Docker"
    description = (
        "up: start on 127.0.0.1, under --dir, MLflow and a Prefect server on PostgreSQL (--postgres, or a throw-away "
        "initdb cluster in --dir), the work pool vlgate-gpu with the deployments of infra/prefect.yaml (prefect deploy), "
        "--workers process workers (one flow each) and `vlgate serve --no-drift` sending every new version to the pool; "
        "print where each UI is. down: stop everything up started (--purge: and drop its databases and folder). "
        "status: what is running. infra/README.md describes the topology."
    )
    json_help = "the stack's state as one JSON object"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("up", "down", "status"))
        parser.add_argument("--dir", metavar="DIR", help="the stack's folder: logs, state, artifacts, throw-away cluster (default: $VLGATE_HOME/stack)")
        parser.add_argument("--workers", type=int, default=2, metavar="N", help="up: process workers on the pool, one validation each at a time (default 2)")
        parser.add_argument("--postgres", metavar="URL", help="up: a PostgreSQL cluster to create the stack's databases on, postgresql://USER@HOST:PORT (default: a throw-away one)")
        parser.add_argument("--purge", action="store_true", help="down: also drop the stack's databases and remove its folder")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.processes import StackError, alive
        from vlgate.cli.stack import LocalStack, describe, state_json
        from vlgate.flows.settings import prepare_environment

        home = prepare_environment()
        folder = Path(args.dir) if args.dir else home / "stack"
        if args.postgres is not None and not args.postgres.startswith("postgresql://"):
            raise UserError(f"--postgres {args.postgres}: expected postgresql://USER@HOST:PORT")
        stack = LocalStack(folder, home, echo=lambda line: print(line, file=sys.stderr))
        try:
            if args.action == "up":
                state = stack.up(args.workers, args.postgres)
            elif args.action == "down":
                state = stack.down(purge=args.purge)
            else:
                found = stack.read_state()
                if found is None:
                    raise UserError(f"no stack in {folder.resolve()}")
                state = found
        except StackError as error:
            raise UserError(str(error)) from None
        data = state_json(state) | {"action": args.action, "running": {p.name: alive(p.pid) for p in state.processes}}

        def text() -> None:
            if args.action == "down":
                print(f"stopped the stack in {state.folder}" + (" and dropped its databases" if args.purge else ""))
                return
            for line in describe(state):
                print(line)
            if args.action == "status":
                for process in state.processes:
                    print(f"  {process.name:<15} pid {process.pid:<8} {'running' if alive(process.pid) else 'stopped'}")

        return Answer(data, text=text)
