"""What a module of vLLM tests starts with: vLLM's CPU build lives in ``.venv-vllm``
(``make test`` runs those modules there). Elsewhere the module skips, unless
``VLGATE_REQUIRE_VLLM=1`` (CI) makes a missing vLLM a failure of each test instead (the
module still collects, so a run that deselects the vllm marker is unaffected)."""

from __future__ import annotations

import os
from typing import Any

import pytest


def vllm_missing() -> str:
    """Why vLLM cannot be imported here ("" when it can); skips the calling module unless CI requires vLLM."""
    try:
        import vllm  # noqa: F401
    except ImportError as error:
        if os.environ.get("VLGATE_REQUIRE_VLLM") != "1":
            pytest.skip("vLLM's CPU build lives in .venv-vllm (make .venv-vllm; make test runs this module there)", allow_module_level=True)
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
