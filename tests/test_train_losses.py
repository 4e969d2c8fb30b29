"""GRPO (losses.py) against hand-computed small cases: advantages, the clipped ratio, k3 KL,
sequence- and token-level averaging, masking, and micro-batches adding up to the batch."""

import math

import pytest

torch = pytest.importorskip("torch")

from ibrl_bench.train.losses import GRPOOptions, group_advantages, grpo_loss  # noqa: E402

ln = math.log


def test_group_advantages_by_hand():
    # mean 3, centred [-2, -1, 0, 3]; unbiased std = sqrt((4 + 1 + 0 + 9) / 3) = 2.1602469
    assert group_advantages([1, 2, 3, 6], scale=True, eps=1e-12) == pytest.approx(
        [-0.9258201, -0.4629100, 0.0, 1.3887301])
    assert group_advantages([1, 2, 3, 6], scale=False) == pytest.approx([-2.0, -1.0, 0.0, 3.0])
    # A group whose rewards are all equal teaches nothing (and does not divide by zero).
    assert group_advantages([5, 5, 5], scale=True) == [0.0, 0.0, 0.0]
    assert group_advantages([7.0], scale=True) == [0.0]


def case():
    """Two samples, T = 3. Column 0 is prompt in both; sample 1's column 1 is prompt too, with
    values that would dominate the loss if the mask leaked (ratio 9, KL of ln 3)."""
    logprobs = torch.tensor([[0.0, ln(0.5), ln(0.6)], [0.0, ln(0.9), ln(0.2)]], requires_grad=True)
    old = torch.tensor([[0.0, ln(0.5), ln(0.4)], [0.0, ln(0.1), ln(0.4)]])
    ref = torch.tensor([[0.0, ln(0.25), ln(0.6)], [0.0, ln(0.3), ln(0.4)]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    return logprobs, old, ref, adv, mask


# Per token, clip_eps = 0.2, kl_coef = 0.1:
#   s0 t1: ratio 1,   A=+1: surrogate 1;               k3(ref/pi = 0.5) = 0.5 + ln 2 - 1 = 0.1931472
#   s0 t2: ratio 1.5, A=+1: min(1.5, 1.2) = 1.2 (clip); k3(1) = 0
#   s1 t2: ratio 0.5, A=-1: min(-0.5, -0.8) = -0.8 (clip); k3(2) = 2 - ln 2 - 1 = 0.3068528
#   L: 1 - 0.01931472 = 0.98068528;  1.2;  -0.8 - 0.03068528 = -0.83068528
def test_sequence_level_loss_by_hand():
    logprobs, old, ref, adv, mask = case()
    loss, stats = grpo_loss(logprobs, old, ref, adv, mask, GRPOOptions(clip_eps=0.2, kl_coef=0.1, averaging="sequence"))
    # J = ((0.98068528 + 1.2) / 2 + (-0.83068528) / 1) / 2 = (1.09034264 - 0.83068528) / 2
    assert loss.item() == pytest.approx(-0.12982868, abs=1e-6)
    assert stats["kl"] == pytest.approx(0.5 / 3, abs=1e-6)  # (0.1931472 + 0 + 0.3068528) / 3
    assert stats["clip_frac"] == pytest.approx(2 / 3)
    assert stats["tokens"] == 3


def test_token_level_loss_by_hand():
    logprobs, old, ref, adv, mask = case()
    loss, _ = grpo_loss(logprobs, old, ref, adv, mask, GRPOOptions(clip_eps=0.2, kl_coef=0.1, averaging="token"))
    assert loss.item() == pytest.approx(-(0.98068528 + 1.2 - 0.83068528) / 3, abs=1e-6)  # -0.45


def test_kl_coef_zero_needs_no_reference():
    logprobs, old, _, adv, mask = case()
    loss, stats = grpo_loss(logprobs, old, None, adv, mask, GRPOOptions(kl_coef=0.0))
    assert loss.item() == pytest.approx(-((1 + 1.2) / 2 - 0.8) / 2, abs=1e-6)  # -0.15
    assert stats["kl"] == 0.0
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(logprobs, old, None, adv, mask, GRPOOptions(kl_coef=0.1))


def test_no_gradient_off_the_mask_nor_through_a_clipped_token():
    logprobs, old, ref, adv, mask = case()
    loss, _ = grpo_loss(logprobs, old, ref, adv, mask, GRPOOptions(clip_eps=0.2, kl_coef=0.1))
    loss.backward()
    g = logprobs.grad
    assert g[0, 0] == 0 and g[1, 0] == 0 and g[1, 1] == 0  # prompt positions
    # s0 t1 is unclipped: d/dlogp [-(ratio*A - 0.1*k3)/2/2] = -(1 - 0.1*(1 - 0.5))/4 = -0.2375
    assert g[0, 1].item() == pytest.approx(-0.2375, abs=1e-6)
    # Clipped tokens keep only the KL gradient: s0 t2 has k3 = 0 and d k3/d logp = 1 - ref/pi = 0.
    assert g[0, 2].item() == pytest.approx(0.0, abs=1e-7)
    # s1 t2: -(-0.1 * (1 - 2)) / 2 = -0.05
    assert g[1, 2].item() == pytest.approx(-0.05, abs=1e-6)


@pytest.mark.parametrize("averaging", ["sequence", "token"])
def test_micro_batches_add_up_to_the_whole_batch(averaging):
    logprobs, old, ref, adv, mask = case()
    options = GRPOOptions(clip_eps=0.2, kl_coef=0.1, averaging=averaging)
    whole, _ = grpo_loss(logprobs, old, ref, adv, mask, options)
    parts = [
        grpo_loss(logprobs[i : i + 1], old[i : i + 1], ref[i : i + 1], adv[i : i + 1], mask[i : i + 1], options,
                  total_tokens=3.0, total_samples=2.0)[0]
        for i in range(2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item(), abs=1e-7)
