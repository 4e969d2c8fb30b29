"""Training recipes: YAML data, validated into the trainer's pydantic config class.

    version: 1            # the recipe format; required
    method: sft           # optional; when present it must match the command that reads the recipe
    steps: 40
    model: {tiny: {hidden_size: 64}}
    ...                   # every other key is a field of the method's config class

`load_recipe(path, SFTConfig, ["steps=80", "optim.lr=1e-4"])` reads the file, applies the
`key=value` overrides (dotted keys reach into nested mappings, creating them where missing; values
are read as YAML, so `80` is an int, `1e-4` a float, `[a, b]` a list, `null` None and `'80'` a
string), and validates the result. Every problem is one `UserError` line that names the file and
the key. A recipe is never executed: it is data, and the config class decides what it may hold.
Relative paths in a recipe are taken from the directory the command runs in, as on the command line.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ibrl_bench.errors import UserError
from ibrl_bench.yaml_files import load_yaml_text, read_yaml_mapping

RECIPE_VERSION = 1
# The trainers: `ibrl-bench train METHOD` runs `run(config, log)` of the module; the config class is
# the annotation of run's first parameter, so each trainer declares it in one place.
METHODS = {"sft": "ibrl_bench.train.sft", "ibrl": "ibrl_bench.train.ibrl", "unilateral": "ibrl_bench.train.unilateral"}
# Keys of the recipe format itself, not of any trainer's config.
FORMAT_KEYS = ("version", "method")

C = TypeVar("C", bound=BaseModel)


def load_recipe(path: str | Path, config_class: type[C], overrides: list[str] | tuple[str, ...] = (),
                method: str | None = None) -> C:
    """The recipe at `path` with `overrides` applied, as a `config_class`, or one line saying what is wrong."""
    path = Path(path)
    data = read_yaml_mapping(path, "recipe", "the shipped recipes are in training/")
    version = data.get("version")
    if version is None:
        raise UserError(f"{path}: no version; add `version: {RECIPE_VERSION}` at the top")
    if version != RECIPE_VERSION:
        raise UserError(f"{path}: version {version!r} is not a recipe format this ibrl-bench reads "
                        f"(it reads {RECIPE_VERSION})")
    if method is not None and data.get("method", method) != method:
        raise UserError(f"{path}: a recipe for method {data['method']!r}, not {method!r}; "
                        f"use `ibrl-bench train {data['method']}`")
    set_by: dict[str, str] = {}
    for item in overrides:
        key, value = parse_override(item, path)
        apply_override(data, key, value, path)
        set_by[key] = item
    fields = {k: v for k, v in data.items() if k not in FORMAT_KEYS or k in config_class.model_fields}
    return validate(fields, config_class, path, set_by)


def trainer(method: str) -> tuple[Any, type[BaseModel]]:
    """(module, config class) of a method's trainer. Imports torch-free modules only at this point;
    the trainers import torch inside `run`."""
    import importlib
    import typing

    module = importlib.import_module(METHODS[method])
    config_class = typing.get_type_hints(module.run)[next(iter(inspect.signature(module.run).parameters))]
    return module, config_class


def config_class(method: str) -> type[BaseModel]:
    return trainer(method)[1]


def parse_override(item: str, path: Path) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", the value read as YAML)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"override {item!r} for {path}: write KEY=VALUE, e.g. steps=20 or optim.lr=1e-4")
    try:
        value = load_yaml_text(raw, f"override {key}") if raw.strip() else ""
    except UserError:
        raise UserError(f"override {item!r} for {path}: the value is not valid YAML; "
                        f"quote it, e.g. {key}='{raw}'") from None
    return key, value


def apply_override(data: dict[str, Any], key: str, value: Any, path: Path) -> None:
    *parents, leaf = key.split(".")
    node = data
    walked = []
    for part in parents:
        walked.append(part)
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise UserError(f"override {key}={value!r} for {path}: {'.'.join(walked)} is {child!r}, not a mapping")
        node = child
    node[leaf] = value


def validate(data: dict[str, Any], config_class: type[C], path: Path, set_by: dict[str, str] | None = None) -> C:
    try:
        return config_class.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        raise UserError(_describe(errors[0], path, config_class, set_by or {}, len(errors) - 1)) from None


def _describe(err: dict[str, Any], path: Path, config_class: type[BaseModel], set_by: dict[str, str], more: int) -> str:
    # A union field's error names the branch after the key (`target_modules.list[str]`): cut it, so
    # the message names a key the recipe can hold.
    key = ".".join(str(x) for x in err["loc"] if not _is_branch(x)) or "(top level)"
    source = next((f" (set by override {item})" for k, item in set_by.items()
                   if key == k or key.startswith(k + ".")), "")
    if err["type"] == "extra_forbidden":
        parent = err["loc"][:-1]
        known = _known_keys(config_class, parent)
        hint = f"; known keys here: {', '.join(known)}" if known else ""
        message = f"{path}: unknown key {key}{source}{hint}"
    elif err["type"] == "missing":
        message = f"{path}: {key} is required{source}"
    else:
        got = err.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        message = f"{path}: {key}{source}: {err['msg']}{shown}"
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''}; fix this one first)"
    return message


def _is_branch(part: object) -> bool:
    return isinstance(part, str) and any(c in part for c in "[]'")


def _known_keys(config_class: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the (nested) model at `loc`, for the hint of an unknown key."""
    model: Any = config_class
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part) if isinstance(part, str) else None
        if field is None:
            return []
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    return list(getattr(model, "model_fields", {}))


def recipe_keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, type, default) of every key a recipe of `model` may hold, nested blocks as dotted keys
    (`model.lora.r`), read from the pydantic config class: what `train METHOD --help` lists."""
    from pydantic_core import PydanticUndefined

    rows = []
    for name, field in model.model_fields.items():
        key = prefix + name
        if field.default_factory is not None:
            default = _as_yaml(field.default_factory())  # type: ignore[call-arg]
        elif field.default is PydanticUndefined:
            default = "required"
        else:
            default = _as_yaml(field.default)
        bounds = ", ".join(f"{op} {getattr(m, attr)}" for m in field.metadata
                          for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"),
                                           ("min_length", "len >="))
                          if getattr(m, attr, None) is not None)
        rows.append((key, _type_name(field.annotation) + (f" ({bounds})" if bounds else ""), default))
        for block in _models_in(field.annotation):
            rows += recipe_keys(block, key + ".")
    return rows


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _type_name(annotation: Any) -> str:
    """`int`, `float or null`, `one of: all, agreement, success`, `list[str]`, `block` (a nested mapping)."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of: " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "block"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def _as_yaml(value: Any) -> str:
    """A default as it would be written in a recipe (true, null, 1.0e-05, all-linear)."""
    import yaml

    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
