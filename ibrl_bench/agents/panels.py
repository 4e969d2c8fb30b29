"""Panels: named, versioned lists of counterparts, kept as YAML in counterparts/panels/."""

from __future__ import annotations

from pydantic import BaseModel

from ibrl_bench.agents.cards import counterparts_dir
from ibrl_bench.agents.spec import parse_spec
from ibrl_bench.errors import UserError
from ibrl_bench.yaml_files import read_yaml


class Panel(BaseModel):
    version: int
    name: str
    domain: str
    description: str = ""
    # The roles its members play (e.g. [buyer]); absent: any role. A policy set against the panel
    # plays the other roles.
    roles: list[str] | None = None
    members: list[str]  # agent specs, usually card:NAME or scripted:DOMAIN/NAME


def available_panels() -> list[str]:
    folder = counterparts_dir() / "panels"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_panel(name: str) -> Panel:
    path = counterparts_dir() / "panels" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(available_panels()) or "none found"
        raise UserError(f"unknown panel {name!r} (looked in {path.parent}); available: {known}")
    panel = read_yaml(path, Panel, "panel", "counterparts/README.md")
    if panel.name != name:
        raise UserError(f"{path} names itself {panel.name!r}; the file name and `name` must match")
    if panel.roles is not None:
        from ibrl_bench.domains import get_domain

        known = get_domain(panel.domain).roles
        unknown = [r for r in panel.roles if r not in known]
        if unknown or not panel.roles:
            raise UserError(f"{path}: roles {panel.roles} must be a non-empty subset of {panel.domain}'s roles "
                            f"({', '.join(known)})")
    for spec in panel.members:
        parse_spec(spec)
    return panel


def expand(specs: list[str], domain: str) -> list[str]:
    """Replace each `panel:NAME` by the panel's members, keeping order and dropping repeats."""
    out: list[str] = []
    for spec in specs:
        if spec.startswith("panel:"):
            panel = load_panel(spec.removeprefix("panel:"))
            if panel.domain != domain:
                raise UserError(f"{spec} is a panel for {panel.domain}, but this run plays {domain}")
            out.extend(panel.members)
        else:
            out.append(spec)
    return list(dict.fromkeys(out))
