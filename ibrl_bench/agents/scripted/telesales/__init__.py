"""Scripted TeleSales sellers and buyers: offline counterparts, deterministic given the seed.

Every agent is stateless (one object serves many concurrent episodes): it reads its own brief from
`obs.private` and re-reads the public dialogue on each call; per-message reading is cached.
Randomness (only the wording) comes from an RNG seeded with the episode seed, scenario, role,
turn and agent name.

    hearing.py   reading the other side's text (the seller's keyword cues, the buyer's offers)
    sellers.py   four sales strategies: consultative, discount_led, pushy_upseller, by_the_book
    buyers.py    one buyer per temperament (hurried, skeptical, friendly, analytical) and persona
    temperaments.py  how each temperament haggles and what it says, as data

The main knobs can be set in the spec: sellers take `markup` and `concession`
(`scripted:telesales/consultative?concession=0.5`), buyers `depth` and `curve`.
"""

from __future__ import annotations

from ibrl_bench.agents.scripted.telesales.buyers import BUYERS, Buyer, PersonaBuyer
from ibrl_bench.agents.scripted.telesales.common import Scripted
from ibrl_bench.agents.scripted.telesales.hearing import hear
from ibrl_bench.agents.scripted.telesales.sellers import SELLERS, Seller

AGENTS: dict[str, type[Scripted]] = {**SELLERS, **BUYERS}

__all__ = ["AGENTS", "BUYERS", "SELLERS", "Buyer", "PersonaBuyer", "Seller", "hear"]
