"""What a module of vLLM tests starts with: vLLM's CPU build lives in ``.venv-vllm``
(``make test`` runs those modules there). Elsewhere the module skips, unless
``VLGATE_REQUIRE_VLLM=1`` (CI) makes a missing vLLM a failure of each test instead (the
module still collects, so a run that deselects the vllm marker is unaffected)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def vllm_missing() -> str:
    """Why vLLM cannot be imported here ("" when it can); skips the calling module unless CI requires vLLM."""
    try:
        import vllm  # noqa: F401
    except ImportError as error:
        if os.environ.get("VLGATE_REQUIRE_VLLM") != "1":
            pytest.skip("vLLM's CPU build lives in .venv-vllm (make vllm-env; make test runs this module there)", allow_module_level=True)
        return str(error)
    return ""


def require_vllm() -> Any:
    """An autouse fixture for the calling module: each test fails while vLLM is missing."""
    missing = vllm_missing()

    @pytest.fixture(autouse=True)
    def vllm_is_installed() -> None:
        if missing:
            pytest.fail(f"VLGATE_REQUIRE_VLLM=1 but vLLM cannot be imported here ({missing}); run these tests in .venv-vllm (make test-vllm)")

    return vllm_is_installed


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def vllm_server(arguments: list[str], log: Path) -> Iterator[str]:
    """``vllm serve`` on 127.0.0.1 with ``arguments`` (``--model`` and the engine's settings),
    its output in ``log``; yields the base URL once ``/health`` answers, stops the server after.
    Started as ``python -m vllm.entrypoints.openai.api_server`` (the same server): the ``vllm``
    command of the CPU build looks up its version under the distribution name ``vllm`` and fails."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *arguments, "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as handle:
        server = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                pytest.fail(f"vllm serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not come up in 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
