"""The local stack's servers and the ports they are given: a port chosen free and taken by
another process before the server binds it (a busy machine, another test lane) moves the
server to another free port instead of failing ``vlgate stack up``."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from vlgate.cli.processes import StackError, answers, stop_group, wait_until
from vlgate.cli.stack import LocalStack
from vlgate.cli.stack_state import StackState


def _stack(tmp_path: Path, port: int) -> tuple[LocalStack, StackState]:
    stack = LocalStack(tmp_path / "stack", tmp_path / "home", echo=lambda _: None)
    stack.logs.mkdir(parents=True)
    state = StackState(
        folder=str(stack.folder), home=str(stack.home), postgres="postgresql://postgres@127.0.0.1:1", databases={"state": "vlgate_state"},
        mlflow_url=f"http://127.0.0.1:{port}", prefect_url="http://127.0.0.1:1", webhook_url="http://127.0.0.1:2/webhooks/mlflow", workers=1,
    )  # fmt: skip
    stack._write(state)
    return stack, state


def test_a_server_whose_port_was_taken_meanwhile_starts_on_another_and_the_state_names_it(tmp_path):
    """A real server process (Python's http.server, which fails to bind as uvicorn does,
    ``Address already in use``) on a port held by this test: the second try, on another free
    port, serves, and stack.json names the port it serves on."""
    tried: list[str] = []

    def start(state: StackState) -> None:
        tried.append(state.mlflow_url)
        port = state.mlflow_url.rsplit(":", 1)[1]
        process, log = stack._start("mlflow", [sys.executable, "-m", "http.server", port, "--bind", "127.0.0.1"], {}, state)
        wait_until(lambda: answers(state.mlflow_url), 30, "MLflow server", process, log)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack, state = _stack(tmp_path, port)
        try:
            running = stack._on_a_free_port(state, "mlflow_url", start)
            assert tried[0] == f"http://127.0.0.1:{port}" and tried[1:] == [running.mlflow_url] and running.mlflow_url != tried[0]
            written = stack.read_state()
            assert written is not None and written.mlflow_url == running.mlflow_url and answers(running.mlflow_url)
            assert [p.name for p in written.processes] == ["mlflow"]  # the process that failed to bind is no longer listed
        finally:
            for process in (stack.read_state() or state).processes:
                stop_group(process.pid)


def test_a_server_that_fails_for_another_reason_is_not_started_again(tmp_path):
    stack, state = _stack(tmp_path, 1)
    tried: list[str] = []

    def start(state: StackState) -> None:
        tried.append(state.mlflow_url)
        raise StackError("MLflow server: the process exited with status 1; its log ends:\nno such database")

    with pytest.raises(StackError, match="no such database"):
        stack._on_a_free_port(state, "mlflow_url", start)
    assert tried == ["http://127.0.0.1:1"]
