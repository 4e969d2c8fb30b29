"""Action masks and truncation of training samples, against hand-built examples."""

import pytest

torch = pytest.importorskip("torch")

from ibrl_bench.train.samples import Sample, collate, prompt_budget, token_logprobs, truncate  # noqa: E402

EOS = 2  # also the pad id below: the case where masks built from token values go wrong


def test_mask_is_one_exactly_on_completion_tokens_when_pad_equals_eos():
    samples = [
        Sample(prompt_ids=[5, 6, 7], completion_ids=[8, EOS], logprobs=[-0.5, -0.1]),
        Sample(prompt_ids=[5, EOS, 9, 10], completion_ids=[11, 12, EOS], logprobs=[-1.0, -2.0, -0.3]),
        Sample(prompt_ids=[5], completion_ids=[EOS], logprobs=[-0.7]),
    ]
    b = collate(samples, pad_id=EOS)
    assert b.input_ids.tolist() == [
        [5, 6, 7, 8, EOS, EOS, EOS],
        [5, EOS, 9, 10, 11, 12, EOS],
        [5, EOS, EOS, EOS, EOS, EOS, EOS],
    ]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0], [1] * 7, [1, 1, 0, 0, 0, 0, 0]]
    # The generated eos counts; the eos inside a prompt and the padding eos do not.
    assert b.action_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1], [0, 1, 0, 0, 0, 0, 0]]
    assert b.old_logprobs[1].tolist() == pytest.approx([0, 0, 0, 0, -1.0, -2.0, -0.3])
    assert b.old_logprobs[0].tolist() == pytest.approx([0, 0, 0, -0.5, -0.1, 0, 0])


def test_truncation_cuts_only_the_completion_and_refuses_a_prompt_built_for_another_budget():
    s = Sample(prompt_ids=[1, 2, 3, 4], completion_ids=[5, 6, 7], logprobs=[-1.0, -2.0, -3.0])
    assert truncate(s, 7) == s
    assert truncate(s, 5) == Sample([1, 2, 3, 4], [5], [-1.0])
    b = collate([s], pad_id=0, max_length=6)
    assert b.input_ids.tolist() == [[1, 2, 3, 4, 5, 6]]
    assert b.action_mask.tolist() == [[0, 0, 0, 0, 1, 1]]
    assert b.old_logprobs.tolist() == [[0, 0, 0, 0, -1.0, -2.0]]
    # The prompt alone fills max_length: it was cut for a longer context, and is not cut again.
    with pytest.raises(ValueError, match="4-token prompt leaves no room in max_length=4"):
        truncate(s, 4)


def test_prompt_budget_is_the_smaller_context_minus_the_room_for_a_move():
    assert prompt_budget(2048, 512, 48) == 464
    assert prompt_budget(256, 512, 48) == 208
    assert prompt_budget(None, 512, 48) == 464
    assert prompt_budget(None, None, 48) is None


def test_logprob_count_must_match_completion():
    with pytest.raises(ValueError, match="2 log-probabilities for 3"):
        Sample([1], [2, 3, 4], [-1.0, -1.0])


def test_token_logprobs_are_aligned_with_the_tokens_they_score():
    class Fixed(torch.nn.Module):
        """Logits that depend only on position: predicts token (t + 1) % 4 at step t."""

        def forward(self, input_ids, attention_mask, **kwargs):
            b, t = input_ids.shape
            logits = torch.full((b, t, 4), -10.0)
            for j in range(t):
                logits[:, j, (j + 1) % 4] = 10.0

            class Out:
                pass

            out = Out()
            out.logits = logits
            return out

    b = collate([Sample([0, 1], [2, 0])], pad_id=3)
    lp = token_logprobs(Fixed(), b)
    assert lp.shape == (1, 4)
    assert lp[0, 0] == 0.0
    assert lp[0, 1] > -1e-3 and lp[0, 2] > -1e-3 and lp[0, 3] < -19  # 0 was not predicted at step 2
