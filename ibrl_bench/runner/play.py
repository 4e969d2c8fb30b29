"""One episode or one move outside a run folder: `ibrl-bench play` and `counterparts check`.

A failure here is told in one line (a UserError): nothing retries it, and nothing is recorded.
"""

from __future__ import annotations

import asyncio
import time

from ibrl_bench.agents.base import Reply
from ibrl_bench.agents.spec import Seat, build_agent
from ibrl_bench.errors import UserError
from ibrl_bench.runner.crossplay import describe_failure
from ibrl_bench.runner.episode import EpisodeResult, play_episode
from ibrl_bench.runner.matrix import Pairing


def play_one(pairing: Pairing, seed: int, max_turns: int | None, move_timeout: float | None) -> EpisodeResult:
    from ibrl_bench.runner.watchdog import LoopWatchdog

    domain = pairing.game.name
    seats = {pairing.role: build_agent(pairing.policy, domain), pairing.other: build_agent(pairing.counterpart, domain)}

    async def episode():
        try:
            async with LoopWatchdog(move_timeout):
                return await play_episode(pairing.game, pairing.scenario, {r: s.agent for r, s in seats.items()},
                                          seed, max_turns, move_timeout, names={r: s.spec for r, s in seats.items()})
        finally:
            await asyncio.gather(*(s.agent.aclose() for s in seats.values()), return_exceptions=True)

    try:
        return asyncio.run(episode())
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - an agent's failure, told in one line
        raise UserError(f"the episode failed: {describe_failure(e, move_timeout)}; check the agents "
                        "(crossplay retries such failures and records them as errors)") from None


def first_move(seat: Seat, domain: str) -> tuple[Reply, float]:
    """The seat's answer to the first observation of the dev split's first scenario, and the seconds it took."""
    from ibrl_bench.agents.remote import RemoteFailure
    from ibrl_bench.domains import get_domain

    game = get_domain(domain)
    state = game.start(game.scenario_set("dev", 1).scenarios[0], seed=0)
    obs = game.observe(state, game.to_move(state)[0])

    async def once():
        try:
            start = time.perf_counter()
            reply = await seat.agent.act(obs)
            return reply, time.perf_counter() - start
        finally:
            await seat.agent.aclose()

    try:
        return asyncio.run(once())
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the transport raised, told in one line
        hint = "" if isinstance(e, RemoteFailure) else "; check the server and the card's base_url, model and key_env"
        name = seat.spec.removeprefix("card:")
        raise UserError(f"{name} did not answer: {describe_failure(e, None)}{hint}") from None
