"""Typed values changed the one way that checks them.

pydantic's ``model_copy`` with ``update`` validates nothing: a misspelt key, a wrong type or a
field that contradicts another would pass into a record or a configuration unnoticed.
:func:`replaced` builds the new value through the model's own validation instead, as a
value read from a file is built.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

Value = TypeVar("Value", bound=BaseModel)


def replaced(value: Value, **changes: object) -> Value:
    """``value`` with ``changes``, validated as a new instance of its model (unknown keys
    refused where the model forbids extras; its validators run). The fields ``value`` was
    given are taken as they are (nested values are not validated again), the others keep
    their defaults: the fields set stay those given, as ``model_copy`` keeps them."""
    given = {name: getattr(value, name) for name in value.model_fields_set}
    return type(value).model_validate(given | changes)
