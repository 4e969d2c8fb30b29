"""Cost per trained token of an IB-RL step against a unilateral step, on the same tiny model.

Both trainers run in this process through their own `run` (train/ibrl.py, train/unilateral.py), from
the same tiny random model (models/tiny.py), with the same recipe settings, alternated (ibrl,
unilateral, ibrl, unilateral ...) so that a shared, noisy machine affects both alike. Unilateral's
counterpart is a frozen copy of the same model (`hf:FOLDER`, sampling at the same temperature and
length), so both steps pay for generating both sides of every dialogue.

What is counted, per optimizer step, from the step's line of the training log:
  step seconds   rollout_s + update_s: the joint rollouts (both sides' generation, with log-probs
                 recorded), then for every trained role its reference forward (KL), its
                 forward/backward and its optimizer step. Model loading and saving are not counted.
  trained tokens `tokens`: the tokens under the action masks of the trained roles (what the
                 policies generated and the loss is taken over); IB-RL trains both roles' tokens,
                 unilateral one role's. Prompts, the counterpart's tokens and padding are not counted.
The first `--warmup` steps of every run are dropped (allocator and thread-pool warm-up).

Reported: cost = step seconds / trained tokens for each method (summed over the kept steps of all
repeats), their ratio IB-RL / unilateral (target <= 1.15), and the same ratio for the update phase
alone (update_s / tokens), which isolates what IB-RL's second, separate update path costs.

With `--prompts`, the comparison is instead IB-RL with the compact role prompt against IB-RL with
the full one (domains/dealnodeal/prompts.py), alternated the same way: reported are the wall
seconds per step (rollout + update; the same scenarios, group size and move length), the CPU
seconds of each whole run (process time, which a shared machine disturbs less than wall time), and
the prompt tokens of a first move under each, with their ratios compact / full.

    python benchmarks/train_step_cost.py [--repeats 2] [--steps 3] [--warmup 1] [--lora] [--json OUT]
    python benchmarks/train_step_cost.py --prompts [--scenarios-per-step 8 --group-size 8] ...
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import ibrl_bench.models  # noqa: F401  (before torch: it sets the OpenMP wait policy)
from ibrl_bench.models.tiny import build_tiny_model
from ibrl_bench.train import ibrl, unilateral


class Capture:
    """A StepLog stand-in that keeps each step's metrics in memory."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    def log(self, step: int, **metrics: Any) -> None:
        self.steps.append(metrics)


def settings(args: argparse.Namespace, model: Path, out: Path, prompt: str = "full") -> dict[str, Any]:
    options: dict[str, Any] = {"model": f"hf:{model}", "device": "cpu"}
    if args.lora:
        options["lora"] = {"r": 8, "alpha": 16}
    return dict(
        model=options, domain="dealnodeal", split="train", out=str(out), steps=args.steps,
        scenarios_per_step=args.scenarios_per_step, group_size=args.group_size, temperature=1.0,
        max_new_tokens=args.max_new_tokens, max_turns=args.max_turns, rollout_batch_size=64,
        micro_batch_size=16, max_length=768, lr=1e-5, kl_coef=0.04, seed=0, prompt=prompt,
    )


def measure(method: str, args: argparse.Namespace, model: Path, work: Path,
            prompt: str = "full") -> list[dict[str, Any]]:
    base = settings(args, model, work / f"{method}-{prompt}", prompt)
    log = Capture()
    if method == "ibrl":
        ibrl.run(ibrl.IBRLConfig(**base), log)
    else:
        counterpart = f"hf:{model}?temperature=1&max_new_tokens={args.max_new_tokens}&batch_size=64&device=cpu"
        unilateral.run(unilateral.UnilateralConfig(**base, role="a", counterpart=counterpart), log)
    return log.steps[args.warmup:]


def cost(steps: list[dict[str, Any]], phase: str = "all") -> float:
    seconds = sum(s["update_s"] if phase == "update" else s["rollout_s"] + s["update_s"] for s in steps)
    return seconds / sum(s["tokens"] for s in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--scenarios-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--lora", action="store_true", help="LoRA (IB-RL: two adapters on one shared base)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--prompts", action="store_true", help="compact vs full role prompt, both IB-RL")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    if args.prompts:
        compare_prompts(args)
        return

    runs: dict[str, list[dict[str, Any]]] = {"ibrl": [], "unilateral": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_tiny_model(work / "tiny", seed=0)
        for repeat in range(args.repeats):
            for method in runs:
                steps = measure(method, args, model, work / f"r{repeat}")
                runs[method].extend(steps)
                print(f"repeat {repeat} {method:10s} {cost(steps) * 1e3:8.2f} ms per trained token "
                      f"({sum(s['tokens'] for s in steps):.0f} tokens in {len(steps)} steps)", flush=True)

    result = {
        method: {
            "ms_per_trained_token": cost(steps) * 1e3,
            "update_ms_per_trained_token": cost(steps, "update") * 1e3,
            "trained_tokens": sum(s["tokens"] for s in steps),
            "steps": len(steps),
            "rollout_s": sum(s["rollout_s"] for s in steps),
            "update_s": sum(s["update_s"] for s in steps),
        }
        for method, steps in runs.items()
    }
    result["ratio_ibrl_over_unilateral"] = cost(runs["ibrl"]) / cost(runs["unilateral"])
    result["update_ratio_ibrl_over_unilateral"] = cost(runs["ibrl"], "update") / cost(runs["unilateral"], "update")
    result["settings"] = {k: v for k, v in vars(args).items() if k != "json"}
    print(json.dumps(result, indent=2))
    print(f"IB-RL / unilateral cost per trained token: {result['ratio_ibrl_over_unilateral']:.3f}x "
          f"(update phase alone: {result['update_ratio_ibrl_over_unilateral']:.3f}x; target <= 1.15x)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def first_prompt_tokens(model: Path, prompt: str) -> int:
    from transformers import AutoTokenizer

    from ibrl_bench.domains import get_domain
    from ibrl_bench.models.chat_template import render

    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("train", 1).scenarios[0], 0)
    return len(render(AutoTokenizer.from_pretrained(model), game.chat_messages(game.observe(state, "a"), prompt)))


def compare_prompts(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict[str, Any]]] = {"full": [], "compact": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_tiny_model(work / "tiny", seed=0)
        tokens = {prompt: first_prompt_tokens(model, prompt) for prompt in runs}
        cpu: dict[str, float] = {prompt: 0.0 for prompt in runs}
        for repeat in range(args.repeats):
            for prompt in runs:
                started = time.process_time()
                steps = measure("ibrl", args, model, work / f"r{repeat}", prompt)
                # CPU seconds of the whole run (loading and warm-up included): robust to a shared machine.
                cpu[prompt] += time.process_time() - started
                runs[prompt].extend(steps)
                print(f"repeat {repeat} {prompt:8s} {per_step(steps):7.2f} s per step "
                      f"(rollout {sum(s['rollout_s'] for s in steps) / len(steps):.2f} s)", flush=True)
    result: dict[str, Any] = {
        prompt: {"s_per_step": per_step(steps), "rollout_s_per_step": sum(s["rollout_s"] for s in steps) / len(steps),
                 "update_s_per_step": sum(s["update_s"] for s in steps) / len(steps), "steps": len(steps),
                 "first_prompt_tokens": tokens[prompt], "cpu_s_per_run": cpu[prompt] / args.repeats}
        for prompt, steps in runs.items()
    }
    result["cpu_ratio_compact_over_full"] = cpu["compact"] / cpu["full"]
    result["step_ratio_compact_over_full"] = per_step(runs["compact"]) / per_step(runs["full"])
    result["prompt_ratio_compact_over_full"] = tokens["compact"] / tokens["full"]
    result["settings"] = {k: v for k, v in vars(args).items() if k != "json"}
    print(json.dumps(result, indent=2))
    print(f"compact / full role prompt: {result['step_ratio_compact_over_full']:.3f}x the wall seconds per IB-RL step, "
          f"{result['cpu_ratio_compact_over_full']:.3f}x the CPU seconds per run, "
          f"{result['prompt_ratio_compact_over_full']:.3f}x the tokens of a first prompt")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def per_step(steps: list[dict[str, Any]]) -> float:
    return sum(s["rollout_s"] + s["update_s"] for s in steps) / len(steps)


if __name__ == "__main__":
    main()
