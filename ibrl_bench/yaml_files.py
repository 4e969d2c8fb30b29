"""Versioned YAML data (cards, tracks) read into their pydantic schema, with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ibrl_bench.errors import UserError

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: Path, model: type[M], what: str, docs: str) -> M:
    """`path` parsed as `model`; bad YAML or a schema error is a UserError naming the file, the
    field and `docs` (where the format is described)."""
    try:
        return model.model_validate(yaml.safe_load(path.read_text()))
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or what
        raise UserError(f"{path}: {where}: {err['msg']}; see {docs} for the {what} format") from None
