"""Who sits where: a cross-play matrix or a single episode resolved from what the user named.

The defaults come from the panel YAML where it can say them: the offline held-out panel of a
domain and role is the panel of that domain whose members are all scripted and which does not
claim the role; a role's scripted players are the members of the offline panel that plays that
role alone. Only what no panel says (Deal-or-NoDeal's demo policies, the pair `play` starts with)
is written here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ibrl_bench.agents.panels import Panel, available_panels, expand, load_panel
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import Domain, Scenario
from ibrl_bench.errors import UserError
from ibrl_bench.runner.crossplay import CrossplayConfig

DEFAULT_DOMAIN = "dealnodeal"
# Policies of the demo matrix where no panel plays the role alone (Deal-or-NoDeal's roles are symmetric).
DEMO_POLICIES = {"dealnodeal": ["scripted:dealnodeal/boulware", "scripted:dealnodeal/tit_for_tat",
                                "scripted:dealnodeal/fair"]}
# `play` without --policy/--counterpart: a scripted agent for each role of the domain, in role order.
PLAY_DEFAULTS = {
    "dealnodeal": ("scripted:dealnodeal/boulware", "scripted:dealnodeal/conceder"),
    "telesales": ("scripted:telesales/consultative", "scripted:telesales/friendly"),
}


def _offline_panels(domain: str) -> list[Panel]:
    panels = [load_panel(name) for name in available_panels()]
    return [p for p in panels if p.domain == domain and all(m.startswith("scripted:") for m in p.members)]


def heldout_panel(domain: str, role: str) -> str:
    """The offline held-out panel a policy playing `role` in `domain` meets."""
    for panel in _offline_panels(domain):
        if panel.roles is None or role not in panel.roles:
            return panel.name
    raise UserError(f"no offline panel of {domain} seats a counterpart for a policy playing {role}; "
                    "add one to counterparts/panels/")


def scripted_players(domain: str, role: str) -> list[str]:
    """Scripted agents that play `role`: an offline panel of that role alone, else the domain's demo policies."""
    for panel in _offline_panels(domain):
        if panel.roles == [role]:
            return list(panel.members)
    return list(DEMO_POLICIES.get(domain, []))


@dataclass(frozen=True)
class Matrix:
    config: CrossplayConfig
    demo: str | None = None  # a line saying which demo was chosen, when nothing was named


def resolve_matrix(domain: str | None, policies: list[str], counterparts: list[str], panels: list[str],
                   roles: list[str], **options) -> Matrix:
    """The crossplay configuration for these flags: panels expanded, the policy's roles inferred
    from the panels' roles, the demo matrix when neither policies nor counterparts are named.
    `options` are the other fields of CrossplayConfig."""
    domain = domain or DEFAULT_DOMAIN
    demo = None
    if not policies and not counterparts and not panels:
        game = get_domain(domain)
        role = roles[0] if len(roles) == 1 else game.roles[0]
        policies, panels = scripted_players(domain, role), [heldout_panel(domain, role)]
        demo = f"demo: {len(policies)} scripted policies x panel {panels[0]}"
    if not policies:
        raise UserError("no --policy given; name at least one, e.g. --policy scripted:dealnodeal/boulware")
    policies = expand(list(policies), domain)
    panel_names = [*panels, *(c.removeprefix("panel:") for c in counterparts if c.startswith("panel:"))]
    members = expand([*counterparts, *(f"panel:{name}" for name in panels)], domain)
    panel_roles = {r for name in panel_names for r in (load_panel(name).roles or ())}
    if not roles and panel_roles and all(c.startswith("panel:") for c in counterparts):
        # The panels' members play these roles (e.g. buyers): the policies play the others.
        roles = [r for r in get_domain(domain).roles if r not in panel_roles]
    if not members:
        raise UserError("no counterpart given; use --counterpart SPEC or --panel NAME")
    config = CrossplayConfig(domain=domain, policies=policies, counterparts=members, roles=list(roles) or None,
                             **options)
    return Matrix(config, demo)


@dataclass(frozen=True)
class Pairing:
    """One episode's seats for `play`: the policy's role and spec, the other role's."""

    game: Domain
    role: str
    policy: str
    other: str
    counterpart: str
    scenario: Scenario


def resolve_episode(domain: str, policy: str | None, counterpart: str | None, role: str | None,
                    split: str, scenario: str) -> Pairing:
    game = get_domain(domain)
    role = role or game.roles[0]
    if role not in game.roles:
        raise UserError(f"unknown role {role!r} for {domain}; use --role {' or --role '.join(game.roles)}")
    other = game.other(role)
    defaults = dict(zip(game.roles, PLAY_DEFAULTS[domain], strict=True))
    return Pairing(game, role, policy or defaults[role], other, counterpart or defaults[other],
                   pick_scenario(game, split, scenario))


def pick_scenario(game: Domain, split: str, scenario: str) -> Scenario:
    """A scenario of `split` by index or id."""
    scenarios = game.scenario_set(split).scenarios
    if scenario.isdigit():
        if int(scenario) >= len(scenarios):
            raise UserError(f"--scenario {scenario} is out of range; the {split} split has {len(scenarios)}")
        return scenarios[int(scenario)]
    chosen = next((s for s in scenarios if s.id == scenario), None)
    if chosen is None:
        raise UserError(f"no scenario {scenario!r} in the {split} split; give an index or an id from it")
    return chosen
