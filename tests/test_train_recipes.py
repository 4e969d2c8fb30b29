"""Recipes are YAML data: overrides typed as YAML, validation into the trainer's config class, and
one-line errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from ibrl_bench.errors import UserError
from ibrl_bench.train.recipes import load_recipe

ROOT = Path(__file__).parent.parent


class Optim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = 1e-3
    betas: list[float] = [0.9, 0.99]


class Toy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: int = Field(10, ge=1)
    name: str = "x"
    optim: Optim = Optim()
    roles: list[str] | None = None
    targets: list[str] | Literal["all"] = "all"


def write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def test_overrides_are_typed_as_yaml_and_reach_nested_keys(tmp_path):
    path = write(tmp_path, "version: 1\nmethod: sft\nsteps: 3\noptim: {lr: 0.1}\n")
    c = load_recipe(path, Toy, ["steps=80", "optim.lr=1e-4", "name='80'", "roles=[a, b]", "optim.betas=[0.5, 0.6]"],
                    method="sft")
    assert c.steps == 80 and c.optim.lr == 1e-4 and c.name == "80" and c.roles == ["a", "b"]
    assert c.optim.betas == [0.5, 0.6]
    assert load_recipe(path, Toy, ["roles=null"]).roles is None
    # A nested block the file does not have is created by the override.
    path = write(tmp_path, "version: 1\n")
    assert load_recipe(path, Toy, ["optim.lr=0.5"]).optim.lr == 0.5


@pytest.mark.parametrize("text,overrides,fragments", [
    ("steps: 3\n", [], ["r.yaml: no version", "version: 1"]),
    ("version: 2\n", [], ["version 2"]),
    ("version: 1\nmethod: ibrl\n", [], ["method 'ibrl'", "ibrl-bench train ibrl"]),
    ("version: 1\nstep: 3\n", [], ["unknown key step", "known keys here: steps"]),
    ("version: 1\noptim: {lrr: 1}\n", [], ["unknown key optim.lrr", "known keys here: lr, betas"]),
    ("version: 1\nsteps: 0\n", [], ["r.yaml: steps", "greater than or equal to 1", "(got 0)"]),
    ("version: 1\n", ["steps=-2"], ["r.yaml: steps (set by override steps=-2)", "greater than or equal to 1"]),
    ("version: 1\n", ["optim.lr=fast"], ["optim.lr (set by override optim.lr=fast)", "'fast'"]),
    ("version: 1\n", ["steps"], ["override 'steps'", "KEY=VALUE"]),
    # A union's error names the key alone, not the branch pydantic tried (targets.list[str]).
    ("version: 1\n", ["targets=3"], ["r.yaml: targets (set by override targets=3): Input should be"]),
    ("version: 1\nsteps: 3\n", ["steps.x=1"], ["override steps.x=1", "steps is 3, not a mapping"]),
    ("version: 1\nsteps: [1\n", [], ["r.yaml: not valid YAML at line"]),
    ("- a\n- b\n", [], ["YAML mapping"]),
])
def test_every_error_is_one_line_naming_the_file_and_the_key(tmp_path, text, overrides, fragments):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as e:
        load_recipe(path, Toy, overrides, method="sft")
    message = str(e.value)
    assert "\n" not in message
    for f in fragments:
        assert f in message, message


def test_a_missing_recipe_says_where_the_shipped_ones_are(tmp_path):
    with pytest.raises(UserError, match="not found; the shipped recipes are in training/"):
        load_recipe(tmp_path / "nope.yaml", Toy)


def test_every_shipped_recipe_validates_against_its_trainer():
    pytest.importorskip("torch")
    from ibrl_bench.train.recipes import METHODS, config_class

    recipes = sorted((ROOT / "training").glob("*.yaml"))
    assert len(recipes) >= 7
    seen = set()
    for path in recipes:
        import yaml

        method = yaml.safe_load(path.read_text())["method"]
        seen.add(method)
        load_recipe(path, config_class(method), method=method)
    assert seen == set(METHODS)


def test_vllm_rollouts_are_a_recipe_option_for_lora_runs_only(tmp_path):
    from ibrl_bench.train.ibrl import IBRLConfig
    from ibrl_bench.train.unilateral import UnilateralConfig

    lora = "version: 1\nmethod: ibrl\nout: o\nmodel: {model: hf:x, lora: {r: 4}}\n"
    assert load_recipe(write(tmp_path, lora), IBRLConfig).rollout_engine == "hf"
    assert load_recipe(write(tmp_path, lora + "rollout_engine: vllm\n"), IBRLConfig).rollout_engine == "vllm"
    full = "version: 1\nmethod: ibrl\nout: o\nmodel: {model: hf:x}\n"
    for config_class, extra in ((IBRLConfig, ""),
                                (UnilateralConfig, "role: a\ncounterpart: scripted:dealnodeal/fair\n")):
        with pytest.raises(UserError) as e:
            load_recipe(write(tmp_path, full + extra), config_class, ["rollout_engine=vllm"])
        message = str(e.value)
        assert "\n" not in message and "rollout_engine" in message and "need LoRA" in message
    with pytest.raises(UserError, match="rollout_engine.*'hf' or 'vllm'"):
        load_recipe(write(tmp_path, lora + "rollout_engine: sglang\n"), IBRLConfig)


def test_vllm_rollouts_without_vllm_installed_stop_with_one_line(tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    from ibrl_bench.train import ibrl, unilateral
    from ibrl_bench.train.policy import LoraOptions, ModelOptions

    model = ModelOptions(model="hf:/never/loaded", lora=LoraOptions(r=4))
    config = ibrl.IBRLConfig(model=model, out=str(tmp_path / "o"), rollout_engine="vllm")
    with pytest.raises(UserError) as e:
        ibrl.run(config)  # before any model is loaded: the path above does not exist
    assert "\n" not in str(e.value) and "vllm-cpu-env.sh" in str(e.value) and "ibrl-bench[vllm]" in str(e.value)
    uni = unilateral.UnilateralConfig(**config.model_dump(), role="a", counterpart="scripted:dealnodeal/fair")
    with pytest.raises(UserError, match="need vLLM"):
        unilateral.run(uni)
