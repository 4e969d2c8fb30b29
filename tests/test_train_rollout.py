"""Rollouts (train/rollout.py) and the traces they are built from (agents/hf_local.py).

The policies are two LoRA adapters on one tiny random model, as IB-RL runs them; the moves are
gibberish, but every id, log-probability and mask is real."""


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ibrl_bench.agents.spec import build_agent  # noqa: E402
from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.models.tiny import build_tiny_model  # noqa: E402
from ibrl_bench.train.policy import LoraOptions, ModelOptions, load_policies  # noqa: E402
from ibrl_bench.train.rollout import collect, policy_agents, shard, step_scenarios  # noqa: E402
from ibrl_bench.train.samples import collate, token_logprobs  # noqa: E402

GAME = get_domain("dealnodeal")
SCENARIOS = GAME.scenario_set("train", 3).scenarios
TEMPERATURE = 0.8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0, num_hidden_layers=1)
    options = ModelOptions(model=str(base), lora=LoraOptions(r=4), device="cpu")
    policies = load_policies(options, list(GAME.roles), lr=1e-3, reference=False)
    # b's adapter made different from a's (both start as the base), so that a move decoded with
    # the wrong adapter would show.
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policies["b"].parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.5)
    agents = policy_agents(policies, GAME, TEMPERATURE, 8, 16)
    assert agents["a"] is agents["b"]  # one agent: both roles' moves in the same batches
    return base, policies, agents


def play(agents, seed=0, scenarios=SCENARIOS[:2], group_size=2):
    return collect(GAME, list(scenarios), agents, group_size, seed, step=1, traced=list(GAME.roles), max_turns=4)


def test_groups_hold_g_rollouts_of_one_scenario_with_every_move_of_both_roles(setup):
    _, _, agents = setup
    groups = play(agents)
    assert [g.scenario.id for g in groups] == [s.id for s in SCENARIOS[:2]]
    for g in groups:
        assert len(g.rollouts) == 2 and len({r.seed for r in g.rollouts}) == 2
        for r in g.rollouts:
            assert set(r.samples) == set(GAME.roles)
            assert g.rewards("a") == [x.outcome.rewards["a"] for x in g.rollouts]
            # 4 talk turns alternate (2 each) and each role states its split: 3 moves per role.
            assert [len(r.samples[role]) for role in GAME.roles] == [3, 3]


@pytest.mark.parametrize("role", ["a", "b"])
def test_a_trace_is_what_the_model_saw_generated_and_sampled_with(setup, role):
    _, policies, agents = setup
    policy, other = policies[role], policies["b" if role == "a" else "a"]
    tok = policy.tokenizer
    group = play(agents, scenarios=SCENARIOS[:1], group_size=1)[0]
    rollout = group.rollouts[0]
    samples = rollout.samples[role]

    def recomputed(p, s):
        with p.active() as model, torch.no_grad():
            batch = collate([s], pad_id=tok.pad_token_id)
            return token_logprobs(model, batch, TEMPERATURE)[0, len(s.prompt_ids):].tolist()

    # Recomputing the log-probabilities of the recorded ids with a training forward of the role's
    # own policy gives the sampling ones back: the ids were not re-tokenized, the temperature
    # matches, and the mixed batch decoded each row with its own role's adapter.
    for s in samples:
        assert recomputed(policy, s) == pytest.approx(s.logprobs, abs=1e-4)
        eos = [i for i, t in enumerate(s.completion_ids) if t == tok.eos_token_id]
        assert eos in ([], [len(s.completion_ids) - 1])  # stops at its first eos, keeps it
    assert any(recomputed(other, s) != pytest.approx(s.logprobs, abs=1e-2) for s in samples)
    # Multi-turn: the role's last prompt holds the other side's messages, as the other side's turns.
    their_texts = [t.text for t in rollout.transcript if t.role == other.name and t.phase == "talk" and t.text]
    assert their_texts, "the other side spoke"
    later_prompt = tok.decode(samples[-1].prompt_ids)
    assert all(text in later_prompt for text in their_texts)


def test_masks_of_a_multi_turn_episode_for_both_roles_with_pad_equal_to_eos(setup):
    _, policies, agents = setup
    tok = policies["a"].tokenizer
    rollout = play(agents, scenarios=SCENARIOS[:1], group_size=1)[0].rollouts[0]
    for role in GAME.roles:
        samples = rollout.samples[role]
        eos = tok.eos_token_id
        batch = collate(samples, pad_id=eos)  # pad == eos
        width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        for row, s in enumerate(samples):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            expected = [0.0] * p + [1.0] * c + [0.0] * (width - p - c)  # built by hand from the trace
            assert batch.action_mask[row].tolist() == expected
            ids = batch.input_ids[row]
            assert ids[batch.action_mask[row] == 1].tolist() == s.completion_ids
            assert (ids[p + c:] == eos).all()  # the padding is eos, and under mask 0
        # A completion cut to fit max_length keeps its prompt whole and its first log-probabilities.
        longest = max(len(s.prompt_ids) for s in samples)
        cut = collate(samples, pad_id=eos, max_length=longest + 1)
        for row, s in enumerate(samples):
            p, c = len(s.prompt_ids), min(len(s.completion_ids), longest + 1 - len(s.prompt_ids))
            assert cut.input_ids[row, :p].tolist() == s.prompt_ids
            assert cut.action_mask[row].tolist()[p: p + c] == [1.0] * c
            assert cut.old_logprobs[row, p: p + c].tolist() == pytest.approx(s.logprobs[:c])


def test_a_model_in_training_mode_for_checkpointing_still_decodes_both_roles_in_one_batch(setup):
    base = setup[0]
    options = ModelOptions(model=str(base), lora=LoraOptions(r=4), device="cpu", gradient_checkpointing=True)
    policies = load_policies(options, list(GAME.roles), lr=1e-3, reference=False)
    agents = policy_agents(policies, GAME, TEMPERATURE, 8, 16)
    groups = collect(GAME, list(SCENARIOS[:1]), agents, 2, 0, 1, traced=list(GAME.roles), max_turns=2)
    assert all(r.samples["a"] and r.samples["b"] for r in groups[0].rollouts)
    assert policies["a"].model.training  # put back as it was after each generate
    assert agents["a"].batcher.stats.largest > 1


def test_rollouts_are_deterministic_given_the_seed(setup):
    _, _, agents = setup

    def fingerprint(groups):
        return [(r.seed, {k: [(s.prompt_ids, s.completion_ids) for s in v] for k, v in r.samples.items()})
                for g in groups for r in g.rollouts]

    first, again, other = play(agents, seed=7), play(agents, seed=7), play(agents, seed=8)
    assert fingerprint(first) == fingerprint(again)
    lps = [s.logprobs for g in first for r in g.rollouts for s in r.samples["a"]]
    lps_again = [s.logprobs for g in again for r in g.rollouts for s in r.samples["a"]]
    assert lps == lps_again
    assert fingerprint(first) != fingerprint(other)


def test_a_role_that_must_be_trained_but_does_not_trace_is_an_error(setup):
    _, _, agents = setup
    mixed = {"a": agents["a"], "b": build_agent("scripted:dealnodeal/boulware", "dealnodeal").agent}
    groups = collect(GAME, list(SCENARIOS[:1]), mixed, 2, 0, 1, traced=["a"], max_turns=4)
    assert set(groups[0].rollouts[0].samples) == {"a"}  # the fixed counterpart yields no samples
    with pytest.raises(RuntimeError, match="role b did not trace"):
        collect(GAME, list(SCENARIOS[:1]), mixed, 2, 0, 1, traced=["a", "b"], max_turns=4)


def test_scenarios_walk_the_split_and_processes_get_whole_groups():
    scenario_set = GAME.scenario_set("train", 5)
    steps = [step_scenarios(scenario_set, t, 5, seed=3) for t in range(2)]
    for chosen in steps:  # one epoch per step here: every scenario once, in a seeded order
        assert sorted(s.id for s in chosen) == sorted(s.id for s in scenario_set.scenarios)
    assert [s.id for s in steps[0]] != [s.id for s in steps[1]]  # reshuffled each epoch
    assert step_scenarios(scenario_set, 1, 5, seed=3) == steps[1]
    chosen = steps[0]
    parts = [shard(chosen, i, 2) for i in range(2)]
    assert sorted(s.id for part in parts for s in part) == sorted(s.id for s in chosen)
    assert not set(s.id for s in parts[0]) & set(s.id for s in parts[1])


def test_with_pad_equal_to_eos_a_row_that_stops_early_keeps_only_its_own_tokens(setup):
    from ibrl_bench.agents.generation import GenRequest
    from ibrl_bench.agents.hf_local import HFAgent, HFParams
    from ibrl_bench.models.loading import load_model, resolve_source

    base = setup[0]
    loaded = load_model(resolve_source(str(base)), device="cpu")
    tok = loaded.tokenizer
    tok.pad_token = tok.eos_token  # pad == eos: finished rows are filled with eos
    agent = HFAgent(loaded.model, tok, HFParams(temperature=1.0, max_new_tokens=10), GAME, loaded.max_positions,
                    trace=True)
    requests = []
    for i, scenario in enumerate(SCENARIOS):
        state = GAME.start(scenario, 0)
        requests.append(GenRequest(messages=GAME.chat_messages(GAME.observe(state, state.speaker)), seed=100 + i))
    first = agent.generate_batch(requests)
    # Make row 0's first token a stop token: same seeds, so row 0 now stops after one token while
    # the others go on, and generate pads row 0 with eos for the rest of the batch.
    stop = first[0].trace.completion_ids[0]
    agent.eos_ids = agent.eos_ids + [stop]
    again = agent.generate_batch(requests)
    assert again[0].trace.completion_ids == [stop]
    assert again[0].trace.logprobs == pytest.approx(first[0].trace.logprobs[:1])
    assert max(len(r.trace.completion_ids) for r in again) > 1
    for r in again:
        ids, lps = r.trace.completion_ids, r.trace.logprobs
        assert len(lps) == len(ids) == r.completion_tokens
        assert all(t not in agent.eos_ids for t in ids[:-1])  # stops at its first stop token
        assert tok.decode(ids, skip_special_tokens=True).strip() == r.text
        assert all(lp <= 0 for lp in lps)
