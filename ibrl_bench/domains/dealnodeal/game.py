"""The Deal-or-NoDeal turn protocol and scoring.

Protocol (rules stated once, here and in docs/dealnodeal.md):
1. Talk. The sides alternate free-text messages; who starts is drawn from the episode seed and the
   scenario, so every cell plays a given (scenario, seed) with the same opener. A message containing
   `<selection>` ends the talk; otherwise it ends after `max_turns` messages (default 10).
   An empty message is a protocol violation and ends the episode.
2. Select. Each side privately states the items it takes, `<split>book=1 hat=2 ball=0</split>`.
   Neither sees the other's split. "no deal" is a valid statement that declines any agreement.
3. Score. The sides agree only if their two splits add up exactly to the pool; then each scores
   sum(taken * own value), otherwise both score 0. A split that cannot be read (see parser.py) is a
   violation: status `invalid`, both score 0, and the violating side(s) are recorded.
Status: `invalid` if any violation, else `max_turns` if the talk hit the limit, else `ok`.
"""

from __future__ import annotations

import random

from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, GameState, Observation, Outcome, Role, Scenario, Turn
from ibrl_bench.domains.dealnodeal import parser, prompts, scenarios
from ibrl_bench.domains.dealnodeal.rules import ITEMS, Vec, dot, is_agreement, is_pareto_optimal

DEFAULT_MAX_TURNS = 10


class DealState(GameState):
    def __init__(self, scenario: Scenario, seed: int, max_turns: int, starter: Role):
        super().__init__(scenario, seed, max_turns, starter)
        self.counts: Vec = tuple(scenario.data["counts"])  # type: ignore[assignment]
        self.values: dict[Role, Vec] = {r: tuple(v) for r, v in scenario.data["values"].items()}  # type: ignore[misc]
        self.speaker: Role = starter
        self.ended_by: str | None = None  # "selection" | "max_turns" | "violation"
        self.splits: dict[Role, parser.ParsedSplit] = {}
        self.violators: list[Role] = []


class DealOrNoDeal(Domain):
    name = "dealnodeal"
    roles = ("a", "b")
    default_max_turns = DEFAULT_MAX_TURNS
    metric_names = ("pareto_optimal", "ended_by_selection")
    prompt_version = prompts.PROMPT_VERSION
    prompt_hash = prompts.PROMPT_HASH
    prompts = prompts.PROMPTS  # last: from here on the class body's `prompts` is the dict

    def chat_messages(self, obs: Observation, prompt: str = DEFAULT_PROMPT) -> list[dict[str, str]]:
        return prompts.chat_messages(obs, self.role_prompt(prompt).name)

    def scenario_set(self, split: str = "test", n: int | None = None):
        return scenarios.scenario_set(split, n)

    def start(self, scenario: Scenario, seed: int, max_turns: int | None = None) -> DealState:
        rng = random.Random(f"{scenario.id}|{seed}|starter")
        starter = self.roles[rng.randrange(2)]
        return DealState(scenario, seed, max_turns or self.default_max_turns, starter)

    def to_move(self, state: DealState) -> list[Role]:  # type: ignore[override]
        if state.over:
            return []
        if state.phase == "talk":
            return [state.speaker]
        return [r for r in self.roles if r not in state.splits]

    def observe(self, state: DealState, role: Role) -> Observation:  # type: ignore[override]
        return Observation(
            domain=self.name,
            role=role,
            phase=state.phase,
            scenario_id=state.scenario.id,
            seed=state.seed,
            turn=sum(1 for t in state.transcript if t.public),
            max_turns=state.max_turns,
            private={
                "items": list(ITEMS),
                "counts": list(state.counts),
                "values": list(state.values[role]),
            },
            dialogue=state.public_messages,
        )

    def apply(self, state: DealState, role: Role, text: str) -> None:  # type: ignore[override]
        if role not in self.to_move(state):
            raise ValueError(f"role {role} cannot move now (phase {state.phase})")
        if state.phase == "talk":
            self._talk(state, role, text)
        else:
            self._select(state, role, text)

    def _talk(self, state: DealState, role: Role, text: str) -> None:
        if not text.strip():
            state.transcript.append(Turn(role=role, phase="talk", text=text, violation="empty message"))
            state.violators.append(role)
            state.ended_by = "violation"
            state.over = True
            return
        selection = parser.has_selection(text)
        state.transcript.append(
            Turn(role=role, phase="talk", text=text, parsed={"selection": True} if selection else None)
        )
        n_messages = sum(1 for t in state.transcript if t.public)
        if selection or n_messages >= state.max_turns:
            state.ended_by = "selection" if selection else "max_turns"
            state.phase = "select"
        else:
            state.speaker = self.other(role)

    def _select(self, state: DealState, role: Role, text: str) -> None:
        split = parser.parse_split(text, state.counts)
        parsed = {"kind": split.kind, "take": list(split.take) if split.take else None}
        violation = split.reason if split.kind == "invalid" else None
        state.transcript.append(
            Turn(role=role, phase="select", text=text, public=False, parsed=parsed, violation=violation)
        )
        state.splits[role] = split
        if violation:
            state.violators.append(role)
        if len(state.splits) == len(self.roles):
            state.over = True

    def outcome(self, state: DealState) -> Outcome:  # type: ignore[override]
        a, b = self.roles
        turns = sum(1 for t in state.transcript if t.public)
        zero = {a: 0.0, b: 0.0}
        metrics: dict[str, float | bool | None] = {"pareto_optimal": None,
                                                   "ended_by_selection": state.ended_by == "selection"}
        if state.violators:
            return Outcome(
                status="invalid", rewards=zero, agreement=False, success=False, turns=turns,
                metrics=metrics, violators=sorted(state.violators),
                detail="; ".join(f"{t.role}: {t.violation}" for t in state.transcript if t.violation),
            )
        status = "max_turns" if state.ended_by == "max_turns" else "ok"
        sa, sb = state.splits[a], state.splits[b]
        if sa.kind == "no_deal" or sb.kind == "no_deal":
            return Outcome(status=status, rewards=zero, agreement=False, success=False, turns=turns,
                           metrics=metrics, detail="a side declared no deal")
        assert sa.take is not None and sb.take is not None
        if not is_agreement(state.counts, sa.take, sb.take):
            return Outcome(status=status, rewards=zero, agreement=False, success=False, turns=turns,
                           metrics=metrics, detail="the two splits do not add up to the pool")
        rewards = {a: float(dot(state.values[a], sa.take)), b: float(dot(state.values[b], sb.take))}
        metrics["pareto_optimal"] = is_pareto_optimal(state.counts, state.values[a], state.values[b], sa.take)
        return Outcome(status=status, rewards=rewards, agreement=True, success=True, turns=turns, metrics=metrics)
