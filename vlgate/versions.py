"""A registered model version's number in its one canonical form, and the names vlgate
takes for a registered model.

MLflow's registry numbers a model's versions 1, 2, 3, ...; every command, the webhook
receiver, the poller and the validation flow take a version only in that form: a positive
whole number without leading zeros (``VERSION_PATTERN``). "01" or "1.0" would name version 1
under another spelling, so that a claim, a run and a decision could be made twice for one
version, and "abc" names none. Such a text is refused where it enters, with one line,
before anything is claimed or started.

A model's name is what MLflow's registry takes (not empty, no ``/`` or ``:``, at most 256
characters: the registry's and the state database's column), less every character that
cannot be shown as written (controls, line and paragraph separators, bidi overrides:
``vlgate.text.UNSAFE``): a name shown escaped cannot be pasted back. Such a name is refused
where it enters vlgate (``vlgate register``, ``vlgate.yaml``, the poller and the webhook).
Every other character is a name's own; commands shown to a person quote it
(``vlgate.text.shell_command``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from vlgate.text import UNSAFE, visible

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


#: the longest model name the registry (and vlgate's state database) holds
MAX_MODEL_NAME = 256


def model_name_problem(name: object) -> str | None:
    """Why vlgate does not take ``name`` as a registered model's name, or None: MLflow's rule
    (``mlflow.utils.validation._validate_model_name``: not blank, no ``/`` or ``:``, not
    ``.`` or ``..``), at most :data:`MAX_MODEL_NAME` characters, and no character that cannot
    be shown as written. The caller names the name; this says what is wrong with it."""
    if not isinstance(name, str) or not name.strip():
        return "a registered model's name cannot be blank"
    if "/" in name or ":" in name:
        return "a registered model's name cannot contain '/' or ':' (MLflow's rule)"
    if name in (".", ".."):
        return "a registered model's name cannot be '.' or '..'"
    if len(name) > MAX_MODEL_NAME:
        return f"a registered model's name is at most {MAX_MODEL_NAME} characters (this one has {len(name)})"
    found = UNSAFE.search(name)
    if found is not None:
        return f"a registered model's name cannot hold {visible(found.group())} (a control character, line break or bidi override: it could not be shown or pasted as written)"
    return None


class VersionRef(BaseModel):
    """One registered model version as vlgate hands it down: the model's name and the
    version's number in its canonical form (:func:`canonical_version`, its one check),
    made where a version enters (a command, the webhook, the poller, the flow's
    parameters), so that nothing deeper parses or spells it again. The model's name is
    checked where it enters vlgate (:func:`model_name_problem`). ``str()``: ``NAME vN``,
    as messages name a version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str

    @field_validator("version", mode="before")
    @classmethod
    def _canonical(cls, value: object) -> str:
        return canonical_version(value)

    @classmethod
    def of(cls, model: str, version: object) -> VersionRef:
        """``model``'s version ``version``, or :class:`VersionError` saying what a version looks like."""
        try:
            return cls(model=model, version=version)  # type: ignore[arg-type]  # checked and made a str by _canonical
        except ValidationError as error:
            cause = error.errors()[0].get("ctx", {}).get("error")
            raise VersionError(str(cause) if cause is not None else str(error)) from None

    @property
    def uri(self) -> str:
        """The version as MLflow loads it (``models:/NAME/N``)."""
        return f"models:/{self.model}/{self.version}"

    def __str__(self) -> str:
        return f"{self.model} v{self.version}"
