"""The prompt budget and the end-of-sequence ids the hf: and vllm: backends share (torch-free)."""

from types import SimpleNamespace

import pytest

from ibrl_bench.errors import UserError
from ibrl_bench.models.chat_template import MIN_PROMPT, end_ids, prompt_budget, reply_length


def test_the_prompt_budget_is_the_context_less_the_reply_and_refuses_no_room():
    assert prompt_budget(None, 64) is None
    assert prompt_budget(2048, 64) == 1984
    assert prompt_budget(64 + MIN_PROMPT, 64) == MIN_PROMPT
    with pytest.raises(UserError, match="max_new_tokens=64 leaves no room .* 70-token context"):
        prompt_budget(70, 64)


def test_end_ids_join_the_generation_config_and_the_tokenizer_once():
    tok = SimpleNamespace(eos_token_id=2)
    assert end_ids([7, 2], tok) == [7, 2]
    assert end_ids(7, tok) == [7, 2]
    assert end_ids(None, tok) == [2]
    with pytest.raises(UserError, match="no end-of-sequence token"):
        end_ids(None, SimpleNamespace(eos_token_id=None))


def test_a_reply_ends_at_its_first_end_id_even_when_padding_reuses_it():
    assert reply_length([5, 6, 2, 2, 2], [2]) == 3
    assert reply_length([5, 6, 7], [2]) == 3
