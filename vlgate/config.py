"""Reading the YAML files vlgate is configured with (suites, gate policies) into pydantic models,
with one error line that names the file and the offending field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


def load_yaml_model(model_class: type[Model], path: str | Path, what: str) -> Model:
    """``model_class`` validated from the YAML at ``path``; ValueError("{what} {path}: ...") otherwise."""
    try:
        return model_class.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except FileNotFoundError:
        raise ValueError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{what} {path}: is a folder, not a YAML file") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{what} {path}: not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{what} {path}: not valid YAML: {error}") from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise ValueError(f"{what} {path}: {problems}") from None
