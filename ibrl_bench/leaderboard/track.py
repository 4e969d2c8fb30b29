"""Tracks: what a leaderboard measures, as data (`leaderboards/<domain>/<track>/track.yaml`).

A track pins everything that changes a number on its board: the domain, the split and the hash
of its scenario set, the counterpart panel with the content hash of every card in it, the seeds,
the roles the policy plays, the turn limit, the metrics, the minimum episodes per cell, and the
prompt the model counterparts read. Its hash covers all of that, and every submission records
it, so two rows of one board were measured on the same games against the same counterparts.

A track whose pins no longer match this harness (a card or the scenario set changed) cannot be
run or verified: it needs a new version, which starts a new board.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ibrl_bench.domains import DOMAINS, get_domain
from ibrl_bench.domains.base import Domain, ScenarioSet, content_hash
from ibrl_bench.errors import UserError
from ibrl_bench.yaml_files import read_yaml

TRACK_FILE = "track.yaml"


class Member(BaseModel):
    """One counterpart of the panel: an agent spec, and the card's hash when the spec is a card."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str
    card_hash: str | None = None


class PinnedScenarios(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    n: int = Field(ge=1)  # the first n of the split
    hash: str


class Track(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=1)
    domain: str
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    kind: str = Field(pattern=r"^(offline|api)$")  # offline: anyone can run the panel; api: keys needed
    description: str = ""
    split: str
    scenarios: PinnedScenarios
    panel: list[Member] = Field(min_length=1)
    seeds: int = Field(1, ge=1)  # seeds 0 .. seeds-1 of every scenario
    roles: list[str] = Field(min_length=1)  # the roles the policy plays
    max_turns: int = Field(ge=2)
    metrics: list[str] = Field(min_length=1)  # the first is the ranked one
    min_episodes_per_cell: int = Field(ge=1)
    prompt: str | None = None  # "version:hash" of the domain's prompt, when a member reads it

    @model_validator(mode="after")
    def _consistent(self) -> Track:
        if self.domain not in DOMAINS:
            raise ValueError(f"unknown domain {self.domain!r}; available: {', '.join(DOMAINS)}")
        roles = get_domain(self.domain).roles
        if set(self.roles) - set(roles) or len(set(self.roles)) != len(self.roles):
            raise ValueError(f"roles {self.roles} must be distinct roles of {self.domain} ({', '.join(roles)})")
        if self.scenarios.n * self.seeds < self.min_episodes_per_cell:
            raise ValueError(f"{self.scenarios.n} scenarios x {self.seeds} seeds give fewer episodes per cell "
                             f"than min_episodes_per_cell ({self.min_episodes_per_cell})")
        specs = [m.spec for m in self.panel]
        if len(set(specs)) != len(specs):
            raise ValueError("the panel lists a counterpart twice")
        return self

    @property
    def id(self) -> str:
        return f"{self.domain}/{self.name}"

    @property
    def hash(self) -> str:
        # The description is prose; everything else changes a number.
        return content_hash(self.model_dump(mode="json", exclude={"description"}))

    @property
    def primary(self) -> str:
        return self.metrics[0]

    @property
    def counterparts(self) -> list[str]:
        return [m.spec for m in self.panel]


def leaderboards_dir() -> Path:
    """$IBRL_BENCH_LEADERBOARDS, else ./leaderboards, else the one next to the package source."""
    env = os.environ.get("IBRL_BENCH_LEADERBOARDS")
    if env:
        return Path(env)
    if Path("leaderboards").is_dir():
        return Path("leaderboards")  # relative, so that printed paths read as a user would type them
    return Path(__file__).resolve().parents[2] / "leaderboards"


def available_tracks(root: Path | None = None) -> list[str]:
    root = root or leaderboards_dir()
    return sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in root.glob(f"*/*/{TRACK_FILE}"))


def track_folder(track_id: str, root: Path | None = None) -> Path:
    return (root or leaderboards_dir()) / track_id


def load_track(ref: str, root: Path | None = None) -> Track:
    """A track by id (`dealnodeal/offline`) or by the path of its track.yaml, as written; see
    `check_pins` for whether this harness can still play it."""
    path = Path(ref)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        path = track_folder(ref, root) / TRACK_FILE
    if not path.is_file():
        known = ", ".join(available_tracks(root)) or "none found"
        raise UserError(f"unknown track {ref!r} (no {path}); tracks: {known}")
    track = read_yaml(path, Track, "track", "leaderboards/README.md")
    if path.parent.name != track.name or path.parent.parent.name != track.domain:
        raise UserError(f"{path} declares track {track.id}; keep it in leaderboards/{track.id}/{TRACK_FILE}")
    return track


def track_scenarios(track: Track) -> ScenarioSet:
    return get_domain(track.domain).scenario_set(track.split, track.scenarios.n)


def current_pins(track: Track) -> dict:
    """What this harness gives for everything the track pins: the scenario set, each card's hash
    and the prompt. Used to write a new track and to check an existing one."""
    from ibrl_bench.agents.cards import load_card
    from ibrl_bench.agents.spec import MODEL_KINDS, parse_spec

    domain: Domain = get_domain(track.domain)
    ss = track_scenarios(track)
    cards = {}
    reads_prompt = False  # whether a member is a language model, which reads the domain's prompt
    for m in track.panel:
        spec = parse_spec(m.spec)
        card = load_card(spec.target) if spec.kind == "card" else None
        cards[m.spec] = card.hash if card else None
        reads_prompt |= card.backend != "scripted" if card else spec.kind in MODEL_KINDS
    return {
        "scenarios": {"version": ss.version, "n": len(ss.scenarios), "hash": ss.hash},
        "cards": cards,
        "prompt": f"{domain.prompt_version}:{domain.prompt_hash}" if reads_prompt else None,
    }


def spec_identities(spec: str) -> set[str]:
    """The names an agent answers to, for telling whether two specs are the same agent: its spec,
    its kind and target without parameters (a variant of an agent is that agent), and for a card
    its content hash and the spec it resolves to."""
    from ibrl_bench.agents.cards import load_card
    from ibrl_bench.agents.spec import parse_spec

    parsed = parse_spec(spec)
    out = {spec, f"{parsed.kind}:{parsed.target}"}
    if parsed.kind == "card":
        card = load_card(parsed.target)
        resolved = parse_spec(card.spec())
        out |= {f"card-hash:{card.hash}", card.spec(), f"{resolved.kind}:{resolved.target}"}
    return out


def panel_member(track: Track, spec: str) -> str | None:
    """The member of the track's panel that `spec` is (the same spec, agent or card), or None."""
    mine = spec_identities(spec)
    for m in track.panel:
        if mine & spec_identities(m.spec):
            return m.spec
    return None


def check_pins(track: Track) -> None:
    """Refuse a track this harness cannot reproduce (a changed scenario set, card or prompt), or
    that pins a model counterpart whose card has not passed the fidelity gate."""
    from ibrl_bench.agents.cards import load_card
    from ibrl_bench.agents.spec import parse_spec
    from ibrl_bench.leaderboard.fidelity import check_gate

    now = current_pins(track)
    fix = f"the track {track.id} needs a new version (and a new board), or restore what changed"
    if now["scenarios"] != track.scenarios.model_dump():
        raise UserError(f"track {track.id} pins scenario set {track.scenarios.hash} ({track.scenarios.version}), "
                        f"but this harness has {now['scenarios']['hash']} ({now['scenarios']['version']}); {fix}")
    for m in track.panel:
        if now["cards"][m.spec] != m.card_hash:
            raise UserError(f"track {track.id} pins {m.spec} at card hash {m.card_hash}, but the card here hashes "
                            f"to {now['cards'][m.spec]}; {fix}")
    if now["prompt"] != track.prompt:
        raise UserError(f"track {track.id} pins prompt {track.prompt}, but this harness speaks {now['prompt']}; {fix}")
    for m in track.panel:
        spec = parse_spec(m.spec)
        if spec.kind == "card":
            check_gate(load_card(spec.target), track.domain)
