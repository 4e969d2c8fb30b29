"""Unilateral RL (train/unilateral.py): one role trained against a fixed counterpart, through
IB-RL's code, with full fine-tuning (no LoRA) and a frozen hf: checkpoint or a scripted agent as
the counterpart."""

import asyncio
import hashlib

import pytest
from pydantic import ValidationError

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from ibrl_bench.agents.spec import build_agent  # noqa: E402
from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.errors import UserError  # noqa: E402
from ibrl_bench.models.tiny import build_tiny_model  # noqa: E402
from ibrl_bench.runner.episode import play_episode  # noqa: E402
from ibrl_bench.train import unilateral  # noqa: E402
from ibrl_bench.train.policy import ModelOptions  # noqa: E402
from ibrl_bench.train.steplog import StepLog, read_log  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0, num_hidden_layers=1)


def config(base, tmp_path, **over):
    fields = dict(model=ModelOptions(model=str(base), device="cpu"), out=str(tmp_path / "out"), steps=2,
                  scenarios_per_step=1, group_size=2, max_new_tokens=8, max_turns=2, lr=1e-3, kl_coef=0.1,
                  max_length=96, domain="dealnodeal", role="a", counterpart="scripted:dealnodeal/boulware")
    fields.update(over)
    return unilateral.UnilateralConfig(**fields)


def digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_training_against_a_frozen_checkpoint_leaves_it_frozen_and_logs_only_the_trained_role(base, tmp_path):
    frozen = build_tiny_model(tmp_path / "frozen", seed=1, num_hidden_layers=1)
    before = digest(frozen)
    cfg = config(base, tmp_path, domain="telesales", role="seller", counterpart=f"hf:{frozen}?max_new_tokens=8")
    with StepLog(cfg.out, cfg.steps, "unilateral", quiet=True) as log:
        specs = unilateral.run(cfg, log)
    assert digest(frozen) == before
    assert specs == {"seller": f"hf:{(tmp_path / 'out' / 'checkpoint-seller').resolve()}"}  # a whole HF folder
    records = read_log(cfg.out)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert set(r["reward"]) == {"seller", "buyer"}  # both sides' rewards are reported...
        for key in ("kl", "entropy", "clip_frac", "loss"):
            assert set(r[key]) == {"seller"}  # ...but only the trained role has an update
        assert r["tokens_per_s"] > 0 and r["kl"]["seller"] >= 0
    # The checkpoint is an hf: policy that plays the domain against anyone.
    game = get_domain("telesales")
    agents = {"seller": build_agent(specs["seller"] + "?max_new_tokens=8", "telesales").agent,
              "buyer": build_agent("scripted:telesales/friendly", "telesales").agent}
    result = asyncio.run(play_episode(game, game.scenario_set("test", 1).scenarios[0], agents, seed=0, max_turns=4))
    assert result.outcome.status in ("ok", "invalid", "max_turns") and result.replies["seller"]


def test_a_role_the_domain_does_not_have_is_one_line(base, tmp_path):
    with pytest.raises(UserError, match="role 'seller' is not a role of dealnodeal; roles are a, b"):
        unilateral.run(config(base, tmp_path, role="seller"))


def test_the_config_refuses_unknown_and_missing_keys(base, tmp_path):
    with pytest.raises(ValidationError, match="group_sise"):
        config(base, tmp_path, group_sise=4)
    with pytest.raises(ValidationError, match="test split is held out"):
        config(base, tmp_path, split="test")
    fields = config(base, tmp_path).model_dump()
    del fields["counterpart"]
    with pytest.raises(ValidationError, match="counterpart"):
        unilateral.UnilateralConfig(**fields)
