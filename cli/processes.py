"""The local stack's processes (``stack.py``): started, waited for, stopped with their
process group, and reaped; a free port on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class StackError(RuntimeError):
    """The stack cannot be started or stopped as asked (one line for the user)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(check: Callable[[], bool], seconds: float, what: str, process: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        if process is not None and process.poll() is not None:
            tail = log.read_text()[-1500:] if log is not None and log.is_file() else ""
            raise StackError(f"{what}: the process exited with status {process.returncode}; its log ({log}) ends:\n{tail}")
        time.sleep(0.5)
    raise StackError(f"{what}: not ready after {seconds:.0f} s (log: {log})")


def answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs: a zombie (dead, its status not yet
    collected, as an orphan under a container's PID 1 that reaps nothing) does not count."""
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: whether the group answers a signal
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        state, _, group = stat.rpartition(")")[2].split()[:3]  # after "(comm)": state, ppid, pgrp
        if int(group) == pgid and state != "Z":
            return True
    return False


def stop_group(pid: int, grace_s: float = 10.0, kill_wait_s: float = 10.0) -> None:
    """SIGTERM to the process group, SIGKILL to what is left after ``grace_s``; returns once
    nothing of the group runs (or ``kill_wait_s`` after the SIGKILL)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if _wait_for_group(pid, grace_s):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _wait_for_group(pid, kill_wait_s)


def _wait_for_group(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        reap(pgid)
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def reap(pid: int) -> None:
    """Collect the exit status of a child this process started (a zombie keeps its group alive)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def run(command: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = log.read_text()[-1500:]
        raise StackError(f"{' '.join(command[:4])} … failed with status {done.returncode}; {log} ends:\n{tail}")
