"""The domains' versioned role prompts: each wording holds the role's own private data only, the
default keeps its recorded hash, and a name that does not exist is one line."""

import json

import pytest

from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import DEFAULT_PROMPT
from ibrl_bench.domains.dealnodeal import prompts as dnd_prompts
from ibrl_bench.errors import UserError

ITEMS = ("book", "hat", "ball")


@pytest.mark.parametrize("prompt", ["full", "compact"])
def test_every_dealnodeal_prompt_holds_the_pool_and_only_the_roles_own_values(prompt):
    game = get_domain("dealnodeal")
    for scenario in game.scenario_set("dev", 20).scenarios:
        state = game.start(scenario, 0)
        for role in game.roles:
            text = json.dumps(game.chat_messages(game.observe(state, role), prompt))
            own, other = scenario.data["values"][role], scenario.data["values"][game.other(role)]
            sep = ", " if prompt == "full" else " "
            assert sep.join(f"{i}={v}" for i, v in zip(ITEMS, own, strict=True)) in text
            if other != own:
                assert sep.join(f"{i}={v}" for i, v in zip(ITEMS, other, strict=True)) not in text
            if prompt == "compact":
                assert " ".join(f"{i}={n}" for i, n in zip(ITEMS, scenario.data["counts"], strict=True)) in text


def test_telesales_compact_prompt_holds_each_side_its_own_brief_only():
    game = get_domain("telesales")
    for scenario in game.scenario_set("dev", 10).scenarios:
        state = game.start(scenario, 0)
        seller = json.dumps(game.chat_messages(game.observe(state, "seller"), "compact"))
        buyer = json.dumps(game.chat_messages(game.observe(state, "buyer"), "compact"))
        persona, brief = scenario.data["buyer"], scenario.data["seller"]
        assert f"${persona['budget']}" in buyer and f"${persona['budget']}" not in seller
        for item in brief["inventory"]:
            assert f"floor ${item['floor']}" in seller and f"${item['floor']}" not in buyer


@pytest.mark.parametrize("domain", ["dealnodeal", "telesales"])
def test_compact_is_a_shorter_wording_with_its_own_version_and_hash(domain):
    game = get_domain(domain)
    full, compact = game.role_prompt(DEFAULT_PROMPT), game.role_prompt("compact")
    # The default is what manifests recorded before there were several: its id must not move.
    assert (full.version, full.hash) == (game.prompt_version, game.prompt_hash)
    assert compact.version != full.version and compact.hash != full.hash
    scenario = game.scenario_set("dev", 1).scenarios[0]
    state = game.start(scenario, 0)
    for role in game.roles:
        obs = game.observe(state, role)
        assert len(json.dumps(game.chat_messages(obs, "compact"))) < 0.8 * len(json.dumps(game.chat_messages(obs)))


def test_dealnodeal_compact_system_prompt_is_a_few_dozen_words():
    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("dev", 1).scenarios[0], 0)
    system = game.chat_messages(game.observe(state, "a"), "compact")[0]["content"]
    full = game.chat_messages(game.observe(state, "a"))[0]["content"]
    assert len(system.split()) <= 30 < len(full.split())
    assert dnd_prompts.PROMPTS["compact"].version == "dnd-compact-v2"


def test_an_unknown_prompt_is_one_line_naming_the_known_ones():
    game = get_domain("dealnodeal")
    with pytest.raises(UserError, match="no role prompt 'tiny'; its prompts: full, compact"):
        game.role_prompt("tiny")


def test_the_compact_select_prompt_restates_the_deal_on_the_table_for_each_side():
    game = get_domain("dealnodeal")
    scenario = game.scenario_set("dev", 1).scenarios[0]
    counts = scenario.data["counts"]
    take = [min(1, n) for n in counts]
    rest = [n - t for n, t in zip(counts, take, strict=True)]
    state = game.start(scenario, 0)
    first = state.speaker
    game.apply(state, first,
               "<propose>" + " ".join(f"{i}={n}" for i, n in zip(ITEMS, [9, 9, 9], strict=True)) + "</propose>")
    game.apply(state, game.other(first),
               "<propose>" + " ".join(f"{i}={n}" for i, n in zip(ITEMS, take, strict=True)) + "</propose>")
    game.apply(state, first, "<selection>")
    said = {role: game.chat_messages(game.observe(state, role), "compact")[-1]["content"] for role in game.roles}
    # The last readable proposal counts (the first one asks for more than the pool holds).
    # Last, as the opening of the split it would be: the latest <split> before the answer is the deal's.
    take_tags = " ".join(f"{i}={n}" for i, n in zip(ITEMS, take, strict=True))
    rest_tags = " ".join(f"{i}={n}" for i, n in zip(ITEMS, rest, strict=True))
    assert said[game.other(first)].endswith(f"you take:\n<split>{take_tags}")
    assert said[first].endswith(f"you take:\n<split>{rest_tags}")
    quiet = game.start(scenario, 1)
    for _ in range(quiet.max_turns):
        game.apply(quiet, quiet.speaker, "hello")
    assert "No offer is on the table." in game.chat_messages(game.observe(quiet, "a"), "compact")[-1]["content"]
