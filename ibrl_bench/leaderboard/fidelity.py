"""The fidelity gate: what a model counterpart must show before a track may pin it.

A counterpart that cannot follow the game's protocol carries no information: every policy scores
the same against it, and its column only pulls every entry down. So before a track pins a card
that runs a language model, the card plays a scripted opponent of known competence on the dev
split (never the test split the boards use), and must reach the gate's thresholds:

- Deal-or-NoDeal: against `scripted:dealnodeal/fair` (which accepts any split it values at half
  or more and proposes even ones), in both roles: agreement >= 50% and the card breaking the
  protocol in <= 20% of the episodes. Scripted reference policies reach 96-100% agreement with
  fair; a counterpart that agrees in fewer than half of the games with the most accommodating
  opponent is not negotiating.
- TeleSales (the card plays the buyer): against `scripted:telesales/consultative`, a sale in
  >= 30% of the episodes and the card breaking the protocol in <= 20%.

The measured values are stored in the card under `fidelity` (not part of its hash: measuring a
card does not change what it pins), and `track.check_pins` refuses a track whose model card has
no passing measurement.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from pydantic import BaseModel

from ibrl_bench import __version__
from ibrl_bench.agents.cards import Card, card_path, load_card
from ibrl_bench.errors import UserError
from ibrl_bench.runner.store import now_iso


class Gate(BaseModel):
    opponent: str
    card_roles: list[str]  # the roles the card plays in the gate
    metric: str  # the rate that must reach `min_rate`
    min_rate: float
    max_invalid: float  # the most episodes the card may end by breaking the protocol
    split: str = "dev"
    scenarios: int = 20


GATES: dict[str, Gate] = {
    "dealnodeal": Gate(opponent="scripted:dealnodeal/fair", card_roles=["a", "b"], metric="agreement",
                       min_rate=0.5, max_invalid=0.2),
    "telesales": Gate(opponent="scripted:telesales/consultative", card_roles=["buyer"], metric="success_at_1",
                      min_rate=0.3, max_invalid=0.2),
}


class Fidelity(BaseModel):
    """One measurement of a card under its domain's gate, as stored in the card."""

    opponent: str
    split: str
    episodes: int
    rate_metric: str
    rate: float
    invalid: float
    gate: str
    passed: bool
    measured_at: str
    harness_version: str


def gate_rule(gate: Gate) -> str:
    return f"{gate.metric} >= {gate.min_rate:.0%} and invalid <= {gate.max_invalid:.0%} against {gate.opponent}"


def is_model_card(card: Card) -> bool:
    return card.backend != "scripted"


def measure(card: Card, domain: str, out: Path, concurrency: int = 16, move_timeout: float = 600.0,
            on_progress=None) -> Fidelity:
    """Play the gate's games (a resumable run in `out`) and read the card's numbers."""
    from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig
    from ibrl_bench.stats.matrix import episodes_frame

    gate = GATES.get(domain)
    if gate is None:
        raise UserError(f"no fidelity gate for domain {domain}")
    config = CrossplayConfig(domain=domain, policies=[f"card:{card.id}"], counterparts=[gate.opponent],
                             roles=gate.card_roles, split=gate.split, scenarios=gate.scenarios,
                             concurrency=concurrency, move_timeout=move_timeout)
    run = Crossplay(config, out)
    progress = asyncio.run(run.run(on_progress))
    records = [r for r in run.store.latest().values() if r.outcome.status != "error"]
    if progress.errors or len(records) < run.total():
        raise UserError(f"the gate's run in {out} has {len(records)} of {run.total()} episodes without an "
                        "infrastructure error; rerun the same command to complete it")
    frame = episodes_frame(records)
    rate = float(frame["agreement" if gate.metric == "agreement" else "success"].astype(float).mean())
    invalid = float(frame["policy_violated"].astype(float).mean())  # the card is the "policy" of this run
    return Fidelity(opponent=gate.opponent, split=gate.split, episodes=len(frame), rate_metric=gate.metric,
                    rate=round(rate, 4), invalid=round(invalid, 4), gate=gate_rule(gate),
                    passed=rate >= gate.min_rate and invalid <= gate.max_invalid, measured_at=now_iso(),
                    harness_version=__version__)


MARK = "# Measured by `ibrl-bench counterparts check NAME --gate`; not part of the card's hash."


def store(card: Card, domain: str, result: Fidelity) -> Path:
    """Write the measurement into the card's file, keeping its comments: the `fidelity` block is
    the file's last, and replaced whole."""
    path = card_path(card.id)
    text = path.read_text()
    head = text.split("\n" + MARK, 1)[0].split("\nfidelity:", 1)[0].rstrip("\n")
    block = {"fidelity": {**card.fidelity, domain: result.model_dump()}}
    path.write_text(f"{head}\n{MARK}\n" + yaml.safe_dump(block, sort_keys=False))
    load_card(card.id)  # the file still reads as a card
    return path


def check_gate(card: Card, domain: str) -> None:
    """Refuse a model card without a passing measurement for `domain` (one line, with the fix)."""
    if not is_model_card(card):
        return
    found = card.fidelity.get(domain)
    how = f"`ibrl-bench counterparts check {card.id} --gate --domain {domain}`"
    if not found:
        raise UserError(f"card {card.id} has no fidelity measurement for {domain}; a track pins a model "
                        f"counterpart only after it passes the gate ({gate_rule(GATES[domain])}): run {how}")
    result = Fidelity.model_validate(found)
    if not result.passed:
        raise UserError(f"card {card.id} fails the fidelity gate for {domain} ({result.rate_metric} "
                        f"{result.rate:.0%}, invalid {result.invalid:.0%} over {result.episodes} episodes; "
                        f"the gate: {result.gate}); a track cannot pin it")
