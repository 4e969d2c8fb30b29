"""Versioned YAML data (cards, panels, tracks, recipes) read into their schema, with one-line errors.
Every YAML file the harness reads goes through here.

Every such file is read with limits before anything walks it: its size, the depth of its nesting,
and the number of nodes it expands to once aliases are followed. PyYAML shares an aliased node
instead of copying it, so a few lines of nested aliases (the "billion laughs") load at once, but
expand to billions of nodes in anything that walks the data: a content hash, a JSON dump,
pydantic's validation. The limits are far above what any real card, panel, track or recipe needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ibrl_bench.errors import UserError

M = TypeVar("M", bound=BaseModel)

MAX_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 32
MAX_NODES = 100_000  # scalars, sequences and mappings, counted with every alias expanded


def load_yaml_text(text: str, source: str) -> Any:
    """`text` parsed as YAML within the limits; any problem is a UserError naming `source`."""
    if len(text) > MAX_BYTES:
        raise UserError(f"{source} is {len(text):,} characters long; a YAML file here may hold at most {MAX_BYTES:,}")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{source}: not valid YAML{where}: {problem}; fix the file") from None
    except RecursionError:
        raise UserError(f"{source} nests deeper than {MAX_DEPTH} levels; flatten it") from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse a document nested deeper than MAX_DEPTH or that expands to more than MAX_NODES."""
    sizes: dict[int, int] = {}  # id(node) -> expanded size: an aliased node is counted once per use

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise UserError(f"{source} nests deeper than {MAX_DEPTH} levels; flatten it")
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = MAX_NODES + 1  # a node that contains itself expands without end
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_NODES:
                raise UserError(f"{source} expands to more than {MAX_NODES:,} values once its aliases "
                                "(*name) are followed; write the values out instead of nesting aliases")
        sizes[id(node)] = total
        return total

    size(root, 0)


def read_yaml_file(path: Path, what: str) -> Any:
    """The YAML data in `path` (within the limits); unreadable or non-UTF-8 files are one line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{what} {path} not found") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.start}); save the {what} as UTF-8") from None
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    return load_yaml_text(text, str(path))


def read_yaml_mapping(path: Path, what: str, where: str) -> dict[str, Any]:
    """The YAML mapping in `path` (within the limits), for data read key by key before validation
    (a recipe, whose keys overrides change); `where` says where such files are found."""
    if not path.exists():
        raise UserError(f"{what} {path} not found; {where}")
    data = read_yaml_file(path, what)
    if not isinstance(data, dict):
        raise UserError(f"{path}: a {what} is a YAML mapping of keys to values, not {type(data).__name__}")
    return data


def read_yaml(path: Path, model: type[M], what: str, docs: str) -> M:
    """`path` parsed as `model`; bad YAML or a schema error is a UserError naming the file, the
    field and `docs` (where the format is described)."""
    data = read_yaml_file(path, what)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or what
        raise UserError(f"{path}: {where}: {err['msg']}; see {docs} for the {what} format") from None
