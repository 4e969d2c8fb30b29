"""What every game shares: scenarios, the public and private views, turns and outcomes.

A domain is a small state machine driven by `runner/episode.py`:

    state = domain.start(scenario, seed, max_turns)
    while not state.over:
        roles = domain.to_move(state)          # one role, or several acting simultaneously
        texts = [agent.act(domain.observe(state, r)) for r in roles]
        domain.apply(state, role, text)        # parse, enforce the rules, record the turn
    outcome = domain.outcome(state)

The domain owns parsing and scoring; agents only ever see an `Observation`, which holds their
own private information and the public dialogue, never the other side's private data.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = str
Status = Literal["ok", "invalid", "max_turns", "error"]
STATUSES: tuple[Status, ...] = ("ok", "invalid", "max_turns", "error")


def content_hash(obj: Any, length: int = 16) -> str:
    """Stable hash of JSON-able content (sorted keys, no whitespace)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


class Scenario(BaseModel):
    """One seeded instance of a domain. `data` is domain-specific and fully public to the harness;
    the domain decides which parts each role may see."""

    model_config = ConfigDict(frozen=True)

    id: str
    domain: str
    data: dict[str, Any]

    @property
    def hash(self) -> str:
        return content_hash({"domain": self.domain, "data": self.data})


class ScenarioSet(BaseModel):
    """An ordered, versioned list of scenarios. `hash` covers the version, split and every
    scenario's content, so two runs with the same hash played the same games."""

    model_config = ConfigDict(frozen=True)

    domain: str
    version: str
    split: str
    scenarios: tuple[Scenario, ...]

    @property
    def hash(self) -> str:
        return content_hash(
            {
                "domain": self.domain,
                "version": self.version,
                "split": self.split,
                "scenarios": [[s.id, s.hash] for s in self.scenarios],
            }
        )

    def head(self, n: int | None) -> ScenarioSet:
        if n is None or n >= len(self.scenarios):
            return self
        return self.model_copy(update={"scenarios": self.scenarios[:n]})


class Message(BaseModel):
    """A public utterance, as every participant sees it."""

    role: Role
    text: str


class Observation(BaseModel):
    """Everything one role may know when it is asked to act."""

    domain: str
    role: Role
    phase: str  # domain-defined, e.g. "talk" or "select"
    scenario_id: str
    seed: int  # the episode seed, for agents that sample (derive per-turn RNGs from it)
    turn: int  # number of public messages so far
    max_turns: int
    private: dict[str, Any]  # this role's private information only
    dialogue: list[Message]  # the public dialogue so far


class Turn(BaseModel):
    """One move as recorded in the transcript. Private moves (a Deal-or-NoDeal split) are recorded
    here but never shown to the other role."""

    role: Role
    phase: str
    text: str
    public: bool = True
    parsed: dict[str, Any] | None = None  # what the domain understood, for reading transcripts
    violation: str | None = None  # set when this move broke the protocol


class Outcome(BaseModel):
    status: Status
    rewards: dict[Role, float]
    agreement: bool
    success: bool  # the domain's Success@1 event for one episode
    turns: int  # public messages exchanged
    metrics: dict[str, float | bool | None] = Field(default_factory=dict)
    violators: list[Role] = Field(default_factory=list)  # roles that broke the protocol
    detail: str | None = None


class GameState:
    """Mutable state of one episode. Domains subclass it with their own fields."""

    def __init__(self, scenario: Scenario, seed: int, max_turns: int, starter: Role):
        self.scenario = scenario
        self.seed = seed
        self.max_turns = max_turns
        self.starter = starter
        self.phase = "talk"
        self.transcript: list[Turn] = []
        self.over = False

    @property
    def public_messages(self) -> list[Message]:
        return [Message(role=t.role, text=t.text) for t in self.transcript if t.public]


def chat_from_dialogue(system: str, obs: Observation, opening: str) -> list[dict[str, str]]:
    """A role prompt and the public dialogue as chat turns: this role's messages are the
    assistant's, the other side's the user's; `opening` stands in for the other side when this
    role speaks first (chat templates expect a user turn before the assistant's)."""
    messages = [{"role": "system", "content": system}]
    if not obs.dialogue or obs.dialogue[0].role == obs.role:
        messages.append({"role": "user", "content": opening})
    for m in obs.dialogue:
        messages.append({"role": "assistant" if m.role == obs.role else "user", "content": m.text})
    return messages


DEFAULT_PROMPT = "full"


@dataclass(frozen=True)
class RolePrompt:
    """One wording of a domain's role prompt. `name` is what an agent spec (`?prompt=NAME`) or a
    training recipe (`prompt: NAME`) selects; `version` changes whenever the wording does; `hash`
    covers the version and every template, and is what manifests record."""

    name: str
    version: str
    templates: dict[str, str]

    @property
    def hash(self) -> str:
        return content_hash([self.version, self.templates])

    @property
    def id(self) -> str:
        return f"{self.version}:{self.hash}"


class Domain(ABC):
    """A two-role game: scenarios, turn protocol, parsing and scoring."""

    name: str
    roles: tuple[Role, Role]
    default_max_turns: int
    # The keys of every Outcome.metrics, so a metric named on the command line (--target-metric) is
    # checked before anything is played rather than after the first round.
    metric_names: tuple[str, ...] = ()

    @abstractmethod
    def scenario_set(self, split: str = "test", n: int | None = None) -> ScenarioSet:
        """The versioned scenarios of a split, in their fixed order, first `n` of them."""

    @abstractmethod
    def start(self, scenario: Scenario, seed: int, max_turns: int | None = None) -> GameState: ...

    @abstractmethod
    def to_move(self, state: GameState) -> list[Role]:
        """Roles that must act now; several roles act simultaneously and privately."""

    @abstractmethod
    def observe(self, state: GameState, role: Role) -> Observation: ...

    @abstractmethod
    def apply(self, state: GameState, role: Role, text: str) -> None:
        """Parse and record one move. Never raises on bad text: a bad move is a violation."""

    @abstractmethod
    def outcome(self, state: GameState) -> Outcome: ...

    # Language-model agents: the domain's versioned role prompts by name; DEFAULT_PROMPT is the one
    # every agent reads unless its spec picks another (prompt_version/hash are the default's).
    prompts: dict[str, RolePrompt] = {}
    prompt_version: str = ""
    prompt_hash: str = ""

    def role_prompt(self, name: str = DEFAULT_PROMPT) -> RolePrompt:
        """The prompt called `name`, or one line naming the ones there are."""
        from ibrl_bench.errors import UserError

        if name not in self.prompts:
            known = ", ".join(self.prompts) or "none"
            raise UserError(f"domain {self.name} has no role prompt {name!r}; its prompts: {known}")
        return self.prompts[name]

    def chat_messages(self, obs: Observation, prompt: str = DEFAULT_PROMPT) -> list[dict[str, str]]:
        """The conversation a chat model sees for `obs` under the role prompt `prompt`: system
        prompt, then alternating turns."""
        raise NotImplementedError(f"domain {self.name} has no prompts for language-model agents")

    def describe(self, scenario: Scenario) -> str:
        """A scenario for a human reader (`ibrl-bench play`); domains with rich data say it better."""
        return json.dumps(scenario.data)

    def other(self, role: Role) -> Role:
        a, b = self.roles
        if role not in self.roles:
            raise ValueError(f"unknown role {role!r} for domain {self.name}; roles are {a}, {b}")
        return b if role == a else a
