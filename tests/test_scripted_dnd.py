"""Scripted Deal-or-NoDeal negotiators, played through the real domain on the dev scenarios."""

from __future__ import annotations

import asyncio
import random
from itertools import product

import pytest

from ibrl_bench.agents.base import Agent, Reply
from ibrl_bench.agents.scripted import build_scripted
from ibrl_bench.agents.scripted.dealnodeal import NEGOTIATORS, Hardliner
from ibrl_bench.domains.base import Message, Observation
from ibrl_bench.domains.dealnodeal.game import DealOrNoDeal
from ibrl_bench.domains.dealnodeal.parser import has_selection, parse_proposal
from ibrl_bench.domains.dealnodeal.rules import complement, dot
from ibrl_bench.domains.dealnodeal.scenarios import make_scenario, scenario_set
from ibrl_bench.errors import UserError

DOMAIN = DealOrNoDeal()
SCENARIOS = scenario_set("dev", 30).scenarios
NAMES = sorted(NEGOTIATORS)


async def _play(agents: dict[str, Agent], scenario, seed: int):
    """One episode, the way the runner plays it: observe every role that moves, then act, then apply.
    Returns the final state, the outcome and the (observation, reply) log."""
    state = DOMAIN.start(scenario, seed)
    log: list[tuple[Observation, str]] = []
    while not state.over:
        roles = DOMAIN.to_move(state)
        observations = [DOMAIN.observe(state, r) for r in roles]
        replies = [await agents[r].act(o) for r, o in zip(roles, observations, strict=True)]
        for role, obs, reply in zip(roles, observations, replies, strict=True):
            log.append((obs, reply.text))
            DOMAIN.apply(state, role, reply.text)
    return state, DOMAIN.outcome(state), log


def play(agents, scenario, seed):
    return asyncio.run(_play(agents, scenario, seed))


def play_all(name_a: str, name_b: str, seed_base: int = 0):
    agents = {"a": NEGOTIATORS[name_a](), "b": NEGOTIATORS[name_b]()}

    async def run():
        return [await _play(agents, s, seed_base + i) for i, s in enumerate(SCENARIOS)]

    return asyncio.run(run())


@pytest.fixture(scope="module")
def matrix():
    """(negotiator as a, negotiator as b) -> the 30 dev episodes."""
    return {(x, y): play_all(x, y) for x, y in product(NAMES, NAMES)}


def rate(episodes) -> float:
    return sum(o.agreement for _, o, _ in episodes) / len(episodes)


def proposals_of(episodes, role):
    """(observation, own take) for every proposal `role` made."""
    for _, _, log in episodes:
        for obs, text in log:
            if obs.role == role and obs.phase == "talk":
                take = parse_proposal(text, tuple(obs.private["counts"]))
                if take is not None:
                    yield obs, take


def test_registry_has_six_documented_strategies():
    assert set(NAMES) >= {"boulware", "conceder", "tit_for_tat", "fair", "hardliner", "random"}
    for name, cls in NEGOTIATORS.items():
        assert cls.name == name and cls.__doc__ and len(cls.__doc__.strip().splitlines()) >= 2
        assert isinstance(build_scripted("dealnodeal", name, {}), Agent)


def test_bad_parameters_are_user_errors():
    assert build_scripted("dealnodeal", "boulware", {"beta": 0.1}).beta == 0.1
    with pytest.raises(UserError, match="beta"):
        build_scripted("dealnodeal", "boulware", {"beta": "fast"})
    with pytest.raises(UserError, match="reservation"):
        build_scripted("dealnodeal", "conceder", {"reservation": 11})
    with pytest.raises(UserError,
                       match=r"unknown parameter 'nonsense' for scripted:dealnodeal/fair; valid parameters: "):
        build_scripted("dealnodeal", "fair", {"nonsense": 1})
    with pytest.raises(UserError, match=r"valid parameters: beta: float = 0.2, reservation: float = 6.0, "
                                        r"u_max: float = 10.0, terse: bool = False$"):
        build_scripted("dealnodeal", "boulware", {"foo": 1})


def test_every_pairing_speaks_the_protocol(matrix):
    for (x, y), episodes in matrix.items():
        for _state, outcome, log in episodes:
            assert outcome.status != "invalid", (x, y, outcome.detail)
            for obs, text in log:
                if obs.phase == "talk":  # every message proposes or ends the talk
                    counts = tuple(obs.private["counts"])
                    assert has_selection(text) or parse_proposal(text, counts) is not None, text


def test_agreement_rates_show_spread(matrix):
    rates = {pair: rate(eps) for pair, eps in matrix.items()}
    assert min(rates.values()) < 0.5 and max(rates.values()) >= 0.9
    # Two hardliners rarely meet; two conceders almost always do.
    assert rates["hardliner", "hardliner"] < 0.5 < 0.9 <= rates["conceder", "conceder"]
    scores = {n: [] for n in NAMES}
    for (x, y), eps in matrix.items():
        for _, o, _ in eps:
            scores[x].append(o.rewards["a"])
            scores[y].append(o.rewards["b"])
    means = sorted(sum(s) / len(s) for s in scores.values())
    assert means[-1] - means[0] > 1.0  # the strategies do not all score alike


def test_accepted_proposal_gives_complementary_splits(matrix):
    n_accepted = 0
    for episodes in matrix.values():
        for state, outcome, log in episodes:
            talk = [(obs, text) for obs, text in log if obs.phase == "talk"]
            obs, text = talk[-1]
            if not has_selection(text) or len(talk) < 2:
                continue
            proposer_obs, proposal_text = talk[-2]
            counts = tuple(obs.private["counts"])
            proposal = parse_proposal(proposal_text, counts)
            assert proposal is not None
            n_accepted += 1
            assert outcome.agreement
            splits = {t.role: tuple(t.parsed["take"]) for t in state.transcript if t.phase == "select"}
            assert splits[proposer_obs.role] == proposal
            assert splits[obs.role] == complement(counts, proposal)
    assert n_accepted > 100


def test_same_seed_same_transcripts_and_random_uses_the_seed():
    def texts(episodes):
        return [[t.text for t in state.transcript] for state, _, _ in episodes]

    for x, y in [("random", "random"), ("tit_for_tat", "fair"), ("boulware", "random")]:
        assert texts(play_all(x, y, 0)) == texts(play_all(x, y, 0))
    assert texts(play_all("random", "random", 0)) != texts(play_all("random", "random", 1000))


def test_replies_depend_only_on_the_observation(matrix):
    """Replaying every recorded observation, shuffled, on fresh agents gives the same replies:
    no hidden per-episode state, no dependence on call order."""
    rng = random.Random(0)
    for (x, y), episodes in matrix.items():
        agents = {"a": NEGOTIATORS[x](), "b": NEGOTIATORS[y]()}
        calls = [(obs, text) for _, _, log in episodes[:5] for obs, text in log]
        rng.shuffle(calls)
        for obs, text in calls:
            assert asyncio.run(agents[obs.role].act(obs.model_copy(deep=True))).text == text


def test_only_own_values_matter():
    """Same own values, different opponent values: role a sees the same observation (bar the
    scenario id) and every deterministic negotiator sends the same first message."""
    counts, own = (1, 2, 3), (4, 0, 2)
    seen, first = set(), {}
    for their in [(0, 2, 2), (2, 1, 2), (4, 3, 0)]:
        state = DOMAIN.start(make_scenario(counts, own, their), 7)
        obs = DOMAIN.observe(state, "a")
        seen.add(obs.model_copy(update={"scenario_id": "x"}).model_dump_json())
        for name in NAMES:
            if name != "random":  # its RNG is seeded with the scenario id, by design
                first.setdefault(name, set()).add(asyncio.run(NEGOTIATORS[name]().act(obs)).text)
    assert len(seen) == 1
    assert all(len(texts) == 1 for texts in first.values())


def test_boulware_concedes_later_than_conceder(matrix):
    """Against the same opponent, boulware's mid-game proposals are worth more to itself."""

    def mid_game_utility(name):
        utils = [
            dot(obs.private["values"], take)
            for obs, take in proposals_of(matrix[name, "hardliner"], "a")
            if 3 <= obs.turn <= 5
        ]
        assert len(utils) >= 20
        return sum(utils) / len(utils)

    assert mid_game_utility("boulware") > mid_game_utility("conceder") + 1.5
    # Boulware still ends its talk at or above its reservation (6).
    late = [
        dot(obs.private["values"], take)
        for obs, take in proposals_of(matrix["boulware", "hardliner"], "a")
        if obs.turn >= 8
    ]
    assert late and min(late) >= 6


def test_hardliner_hardly_concedes(matrix):
    floor = Hardliner().final
    for name in NAMES:
        for role, episodes in (("a", matrix["hardliner", name]), ("b", matrix[name, "hardliner"])):
            for obs, take in proposals_of(episodes, role):
                u = dot(obs.private["values"], take)
                assert u >= floor
                if obs.turn < obs.max_turns - 2:
                    assert u == 10  # everything it values until its final message


def test_random_proposals_are_legal_and_varied(matrix):
    takes = set()
    for name in NAMES:
        for obs, take in proposals_of(matrix["random", name], "a"):
            assert all(0 <= n <= c for n, c in zip(take, obs.private["counts"], strict=True))
            takes.add((obs.scenario_id, take))
    assert len(takes) > 40


class Babbler(Agent):
    """A counterpart that writes anything, as a language model might."""

    LINES = ["lol", "<propose>book=99 hat=0 ball=0</propose>", "<propose>garbage</propose>",
             "I take all the books", "<split>book=1 hat=1 ball=1</split>", "\u2603" * 50]

    async def act(self, obs: Observation) -> Reply:
        if obs.phase == "select":
            return Reply(text="<split>no deal</split>")
        return Reply(text=self.LINES[obs.turn % len(self.LINES)])


def test_garbage_from_the_opponent_never_crashes():
    for name in NAMES:
        for scenario in SCENARIOS[:5]:
            state, outcome, log = play({"a": NEGOTIATORS[name](), "b": Babbler()}, scenario, 1)
            assert "a" not in outcome.violators


def test_no_proposal_on_the_table_states_the_ideal():
    counts, values = (2, 2, 1), (3, 2, 0)
    obs = Observation(
        domain="dealnodeal", role="a", phase="select", scenario_id="x", seed=0, turn=1, max_turns=10,
        private={"items": ["book", "hat", "ball"], "counts": list(counts), "values": list(values)},
        dialogue=[Message(role="b", text="whatever <selection>")],
    )
    for name in NAMES:
        text = asyncio.run(NEGOTIATORS[name]().act(obs)).text
        assert text == "<split>book=2 hat=2 ball=0</split>"


@pytest.mark.parametrize("name", NAMES)
def test_terse_negotiators_make_the_same_moves_in_tags_alone(name):
    counterpart = NEGOTIATORS["boulware" if name != "boulware" else "fair"]
    terse_params = counterpart.params_model(terse=True)
    for scenario in SCENARIOS[:10]:
        plain = play({"a": build_scripted("dealnodeal", name, {}), "b": counterpart()}, scenario, 3)
        terse = play({"a": build_scripted("dealnodeal", name, {"terse": True}), "b": counterpart(terse_params)},
                     scenario, 3)
        assert terse[1] == plain[1]  # the same outcome, turn for turn
        counts = tuple(scenario.data["counts"])
        for (_, said), (_, short) in zip(plain[2], terse[2], strict=True):
            assert parse_proposal(short, counts) == parse_proposal(said, counts)
            assert has_selection(short) == has_selection(said)
            if parse_proposal(short, counts) is not None:
                assert short.startswith("<propose>") and short.endswith("</propose>")
            elif has_selection(short):
                assert short == "<selection>"
    with pytest.raises(UserError, match=r"bad parameter terse='yes' .*valid boolean"):
        build_scripted("dealnodeal", name, {"terse": "yes"})
