"""``VLGATE_HOME``: the one folder holding the embedded default's state."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = "./vlgate-data"


def vlgate_home() -> Path:
    """The state folder: ``$VLGATE_HOME``, else ``./vlgate-data``; pointing it elsewhere gives a fresh instance."""
    return Path(os.environ.get("VLGATE_HOME", DEFAULT_HOME))
