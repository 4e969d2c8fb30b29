"""Counterpart cards and panels: validation, resolution, pinning, and the counterparts command."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ibrl_bench.agents.cards import load_card
from ibrl_bench.agents.panels import expand, load_panel
from ibrl_bench.agents.spec import build_agent
from ibrl_bench.errors import UserError
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

SHIPPED = Path(__file__).parents[1] / "counterparts"

GOOD = """version: 1
id: {id}
backend: {backend}
model: {model}
{extra}
domains: [dealnodeal]
"""


@pytest.fixture
def cards(tmp_path, monkeypatch):
    """A counterparts folder of our own, with the shipped panels folder empty."""
    (tmp_path / "panels").mkdir()
    monkeypatch.setenv("IBRL_BENCH_COUNTERPARTS", str(tmp_path))

    def write(name: str, text: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return path

    return write


def test_every_shipped_card_and_panel_validates():
    names = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    assert {"deepseek-v4-pro", "gpt-4.1-mini", "qwen2.5-7b-instruct-vllm", "smollm2-135m-instruct"} <= set(names)
    for name in names:
        card = load_card(name)
        assert card.key_env is None or card.key_env.isupper()
        assert card.spec().startswith(card.backend + ":")
        if card.backend in ("hf", "vllm"):  # parameters the backend takes (checked without torch or weights)
            from ibrl_bench.agents.params import HFParams, VLLMParams, parse_params
            from ibrl_bench.agents.spec import parse_spec

            spec = parse_spec(card.spec())
            parse_params(HFParams if card.backend == "hf" else VLLMParams, spec.params, spec.text)
    for panel in (SHIPPED / "panels").glob("*.yaml"):
        for spec in load_panel(panel.stem).members:
            if spec.startswith("card:"):
                load_card(spec.removeprefix("card:"))


def test_card_spec_names_the_key_variable_never_the_key(monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-secret-value-123456")
    spec = load_card("deepseek-v4-pro").spec()
    assert "key_env=DEEPSEEK_API_KEY" in spec and "sk-secret" not in spec
    seat = build_agent("card:deepseek-v4-pro", "dealnodeal")
    assert seat.card.id == "deepseek-v4-pro" and seat.spec == "card:deepseek-v4-pro"
    assert not hasattr(seat.agent, "card")  # the card is the seat's, not attached to the agent


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD.format(id="c", backend="openai", model="m", extra="colour: red"), "colour: Extra inputs"),
        (GOOD.format(id="c", backend="telepathy", model="m", extra=""), "backend"),
        (GOOD.format(id="c", backend="openai", model="m", extra="key_env: sk-live-abc123"), "not a key"),
        (GOOD.format(id="other", backend="openai", model="m", extra=""), "file name and `id` must match"),
        ("version: 1\nid: c\n", "backend: Field required"),
        ("version: [1\n", "not valid YAML"),
    ],
)
def test_bad_cards_are_refused_with_one_line(cards, text, message):
    cards("c", text)
    with pytest.raises(UserError, match=message) as e:
        load_card("c")
    assert "\n" not in str(e.value)


def test_card_pins_domain_prompt_version_and_roles(cards, tmp_path):
    cards("old", GOOD.format(id="old", backend="scripted", model="dealnodeal/fair",
                             extra="prompt_versions: {dealnodeal: dnd-prompt-v0}"))
    with pytest.raises(UserError, match="pinned to prompt dnd-prompt-v0"):
        build_agent("card:old", "dealnodeal")
    cards("fair", GOOD.format(id="fair", backend="scripted", model="dealnodeal/fair", extra="roles: {dealnodeal: [b]}"))
    with pytest.raises(UserError, match="a card pins its parameters"):
        build_agent("card:fair?temperature=0", "dealnodeal")
    config = dict(policies=["scripted:dealnodeal/boulware"], counterparts=["card:fair"], scenarios=2)
    with pytest.raises(UserError, match="may play b in dealnodeal, but this run seats it as a"):
        Crossplay(CrossplayConfig(**config), tmp_path / "run")
    Crossplay(CrossplayConfig(**config, roles=["a"]), tmp_path / "run")  # policy a, card b: fine
    with pytest.raises(UserError, match="unknown card 'nope'"):
        build_agent("card:nope", "dealnodeal")


def test_a_changed_card_is_part_of_the_run_identity(cards, tmp_path):
    cards("fair", GOOD.format(id="fair", backend="scripted", model="dealnodeal/fair", extra=""))
    config = CrossplayConfig(policies=["scripted:dealnodeal/boulware"], counterparts=["card:fair"], scenarios=2)
    runner = Crossplay(config, tmp_path / "run")
    asyncio.run(runner.run())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["agents"]["card:fair"]["card_hash"] == load_card("fair").hash
    assert manifest["agents"]["card:fair"]["resolved"] == "scripted:dealnodeal/fair"
    cards("fair", GOOD.format(id="fair", backend="scripted", model="dealnodeal/conceder", extra=""))
    with pytest.raises(UserError, match="different configuration"):
        asyncio.run(Crossplay(config, tmp_path / "run").run())


def test_panels_expand_wherever_a_spec_goes(cards, tmp_path):
    (tmp_path / "panels" / "mine.yaml").write_text(
        "version: 1\nname: mine\ndomain: dealnodeal\nmembers: [scripted:dealnodeal/fair, card:x]\n")
    assert expand(["scripted:dealnodeal/fair", "panel:mine"], "dealnodeal") == ["scripted:dealnodeal/fair", "card:x"]
    with pytest.raises(UserError, match="is a panel for dealnodeal"):
        expand(["panel:mine"], "telesales")
    with pytest.raises(UserError, match="names several agents"):
        build_agent("panel:mine", "dealnodeal")


def ibrl(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ibrl_bench", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_counterparts_command_lists_shows_and_checks(tmp_path):
    listed = ibrl("counterparts", "list", env={"COLUMNS": "200"})
    assert listed.returncode == 0 and "deepseek-v4-pro" in listed.stdout and "dealnodeal-scripted-heldout" in listed.stdout
    shown = ibrl("counterparts", "show", "gpt-4.1-mini")
    assert shown.returncode == 0 and "gpt-4.1-mini-2025-04-14" in shown.stdout and "key_env=OPENAI_API_KEY" in shown.stdout
    env = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
    missing = subprocess.run([sys.executable, "-m", "ibrl_bench", "counterparts", "check", "deepseek-v4-pro"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "DEEPSEEK_API_KEY is not set" in missing.stderr


def test_counterparts_check_sends_one_request(tmp_path):
    pytest.importorskip("fastapi")
    from ibrl_bench.testing.fake_openai import Faults, make_app, serve

    (tmp_path / "panels").mkdir()
    app = make_app(Faults(required_key="k-0123456789"))
    with serve(app) as url:
        (tmp_path / "fake.yaml").write_text(GOOD.format(
            id="fake", backend="openai", model="scripted:dealnodeal/fair",
            extra=f"base_url: {url}\nkey_env: FAKE_CHECK_KEY\nparams: {{observation: true}}"))
        proc = ibrl("counterparts", "check", "fake",
                    env={"IBRL_BENCH_COUNTERPARTS": str(tmp_path), "FAKE_CHECK_KEY": "k-0123456789"})
    assert proc.returncode == 0, proc.stderr
    assert "answered in" in proc.stdout and "<propose>" in proc.stdout and app.state.requests == 1
