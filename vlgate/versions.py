"""A registered model version's number in its one canonical form.

MLflow's registry numbers a model's versions 1, 2, 3, ...; every command, the webhook
receiver, the poller and the validation flow take a version only in that form: a positive
whole number without leading zeros (``VERSION_PATTERN``). "01" or "1.0" would name version 1
under another spelling, so that a claim, a run and a decision could be made twice for one
version, and "abc" names none. Such a text is refused where it enters, with one line,
before anything is claimed or started.
"""

from __future__ import annotations

import re

#: what the registry's version numbers look like (at most 18 digits: a 64-bit integer)
VERSION_PATTERN = r"^[1-9][0-9]{0,17}$"
_VERSION = re.compile(VERSION_PATTERN)


class VersionError(ValueError):
    """A text that is not a version number in its canonical form."""


def canonical_version(text: object) -> str:
    """``text`` as a version number (``"3"``), or :class:`VersionError` saying what a version
    looks like. An ``int`` is taken as its decimal form; nothing is normalised (``"03"`` is
    refused, not read as 3), so a version is spelled one way everywhere."""
    value = str(text) if isinstance(text, int) and not isinstance(text, bool) else text
    if not isinstance(value, str) or _VERSION.fullmatch(value) is None:
        raise VersionError(f"version {value!r}: expected the registry's number, a positive whole number without leading zeros (1, 2, 10)")
    return value
