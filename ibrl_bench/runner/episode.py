"""The one dialogue loop: used by the cross-play runner and by the trainers' rollouts.

Nothing else lives here: retries belong to the backends and the runner, scoring to the domain,
persistence to the store. Any exception from an agent (or a move that outlasts `move_timeout`)
propagates to the caller, which decides what an infrastructure failure means. The timeout
measures the agent's work on the move: an agent that queues the move behind other episodes'
work restarts the move's clock as that queue moves (agents/base.py, MoveClock). An agent that
ends a move with SystemExit, KeyboardInterrupt, a CancelledError of its own (any BaseException that
is not an Exception), or answers with something other than a Reply, is broken rather than
unlucky: that stops the run (AgentCrashed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from ibrl_bench.agents.base import Agent, MoveClock, Reply, Usage, current_move_clock
from ibrl_bench.domains.base import Domain, GameState, Observation, Outcome, Role, Scenario
from ibrl_bench.errors import FatalAgentError


class AgentCrashed(FatalAgentError):
    """An agent failed in a way no retry can mend; the message names it and the fix."""


@dataclass
class EpisodeResult:
    state: GameState
    outcome: Outcome
    replies: dict[Role, list[Reply]] = field(default_factory=dict)

    def usage(self) -> dict[Role, Usage]:
        totals: dict[Role, Usage] = {}
        for role, replies in self.replies.items():
            u = Usage()
            for r in replies:
                if r.usage:
                    u.add(r.usage)
            totals[role] = u
        return totals


async def play_episode(
    domain: Domain,
    scenario: Scenario,
    agents: Mapping[Role, Agent],
    seed: int,
    max_turns: int | None = None,
    move_timeout: float | None = None,
    names: Mapping[Role, str] | None = None,
) -> EpisodeResult:
    """`names`: what errors call each role's agent (its spec); the agent's class name where absent."""
    state = domain.start(scenario, seed, max_turns)
    replies: dict[Role, list[Reply]] = {role: [] for role in domain.roles}
    while not state.over:
        movers = domain.to_move(state)
        # Observe every mover before applying any move: simultaneous moves stay private.
        observations = [domain.observe(state, role) for role in movers]
        answers = await _all(_timed(agents[o.role], o, move_timeout, (names or {}).get(o.role)) for o in observations)
        for role, reply in zip(movers, answers, strict=True):
            replies[role].append(reply)
            domain.apply(state, role, reply.text)
    return EpisodeResult(state=state, outcome=domain.outcome(state), replies=replies)


async def _timed(agent: Agent, obs: Observation, timeout: float | None, name: str | None) -> Reply:
    """`agent.act(obs)`, failing with TimeoutError once its clock has run `timeout` seconds."""
    if timeout is None:
        return await _act(agent, obs, name)
    loop = asyncio.get_running_loop()
    clock = MoveClock()
    token = current_move_clock.set(clock)
    try:
        move = asyncio.ensure_future(_act(agent, obs, name))  # the task copies the context: it sees `clock`
    finally:
        current_move_clock.reset(token)
    try:
        while True:
            left = clock.started + timeout - loop.time()
            if left <= 0:
                raise TimeoutError(f"a move took longer than {timeout} s")
            done, _ = await asyncio.wait({move}, timeout=left)
            if done:
                return move.result()
    finally:
        if not move.done():
            move.cancel()
            await asyncio.gather(move, return_exceptions=True)
        elif not move.cancelled():
            move.exception()  # collected: a move that failed as its episode was stopped is not "never retrieved"


async def _act(agent: Agent, obs: Observation, name: str | None) -> Reply:
    """`agent.act(obs)`, with the ways an agent can break the process turned into one clear error.
    The watchdog (runner/watchdog.py) reads `name` from this frame to name an agent that blocks."""
    name = name or type(agent).__name__
    fix = "an agent returns a Reply, or raises an ordinary exception for a failed move; fix the agent"
    try:
        reply = await agent.act(obs)
    except Exception:
        raise  # an ordinary failure: the caller decides (crossplay: an `error` episode, retried)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # cancelled from outside (a timeout, a stopped run): not the agent's doing
        raise AgentCrashed(f"{name} raised CancelledError of its own during a move; {fix}") from None
    except BaseException as e:  # SystemExit, KeyboardInterrupt, GeneratorExit ... from the agent itself
        raise AgentCrashed(f"{name} raised {type(e).__name__} during a move; {fix}") from None
    if not isinstance(reply, Reply):
        raise AgentCrashed(f"{name} answered a move with {type(reply).__name__}, not a Reply; "
                           "return ibrl_bench.agents.base.Reply(text=...)")
    return reply


async def _all(coros) -> list[Reply]:
    """Await simultaneous moves; if one fails, cancel the others instead of leaving them running."""
    coros = list(coros)
    if len(coros) == 1:  # one mover (most moves): awaited in this task, with no task of its own
        return [await coros[0]]
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
