"""`vllm:` agents: the vLLM offline engine (a GPU, or a CPU with the `vllm-cpu` build).

    vllm:PATH[?adapter=DIR&gguf_file=NAME&max_new_tokens=64&temperature=0&top_p=1&batch_size=64&window_ms=5
               &dtype=auto&gpu_memory_utilization=0.9&max_model_len=N&tensor_parallel_size=1]

PATH is resolved like `hf:` (a folder, a .gguf file, package:NAME, or a model id already in the
local Hugging Face cache; never downloaded); a GGUF is first converted to safetensors once, as
for `hf:`. Requests from concurrent episodes are gathered by the same batcher as `hf:` and each
batch goes to one `LLM.generate` call in a worker thread.

Same prompts, same replies as `hf:`. The tokenizer is the one `hf:` loads (models/loading.py: the
same chat template, pad and control tokens), and vLLM is handed token ids, never text; vLLM's own
tokenizer is not even loaded. Decoding stops at the same end-of-sequence ids as `hf:` and the
reply is decoded by that tokenizer the same way, so usage and text are counted alike.

Sampling. vLLM seeds each request itself (`SamplingParams.seed`), from the same per-request seed
as `hf:`, so sampling does not depend on the batch. vLLM's random streams are not torch's
multinomial, so a seed does not draw the same tokens in `hf:` and `vllm:`; greedy decoding is the
same up to float rounding.

Traces (for the trainers' rollouts; see train/rollout.py). With `trace=True` each reply carries the
prompt ids, the generated ids up to and including the first end-of-sequence id, and their
log-probabilities. vLLM reports by default the log-probability under the model's RAW distribution
(T = 1, before top-p); the engine is therefore built with `logprobs_mode="processed_logprobs"`,
the distribution the token was actually drawn from: logits / temperature, then top-p, exactly
what `hf:` records and what the trainer's GRPO ratio recomputes (samples.token_logprobs at the
rollout temperature). Greedy rows are scored at T = 1, as in `hf:`. `adapters` (role -> LoRA
request) decodes each row with its role's adapter; the trainer swaps them after every update.

On a CPU (vLLM's CPU build): the engine runs float32 as `hf:` does, and in the caller's process
(VLLM_ENABLE_V1_MULTIPROCESSING=0 unless set); its KV cache takes `gpu_memory_utilization` of the
RAM, or `kv_cache_gb` when given, which is the easier one to get right on a shared machine.

vLLM is imported only when a spec or recipe names it, so the rest of the harness runs without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ibrl_bench.agents.base import Trace
from ibrl_bench.agents.batching import Batcher
from ibrl_bench.agents.generation import BatchedAgent, GenRequest, GenResult, require_prompts
from ibrl_bench.agents.params import VLLMParams, parse_params
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains.base import Domain
from ibrl_bench.errors import UserError
from ibrl_bench.models.chat_template import end_ids, prompt_budget

INSTALL_HINT = (
    "vllm: agents need vLLM, which is not installed here; on a machine with an NVIDIA GPU run "
    "pip install 'ibrl-bench[vllm]', on a CPU run scripts/vllm-cpu-env.sh (best in its own virtual "
    "environment: vLLM pins its own torch)"
)
# LoRA ranks vLLM can reserve room for (it refuses any other max_lora_rank).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def import_vllm() -> Any:
    """The vllm module, or the one line that says how to install it."""
    try:
        import vllm
        from vllm.lora.request import LoRARequest  # noqa: F401  (fails on a broken install too)
    except ModuleNotFoundError:
        raise UserError(INSTALL_HINT) from None
    return vllm


def from_spec(spec: AgentSpec, domain: str) -> VLLMAgent:
    params = parse_params(VLLMParams, spec.params, spec.text)
    import_vllm()
    from vllm.lora.request import LoRARequest

    from ibrl_bench.models.loading import adapter_folder, converted_gguf, resolve_source

    game = require_prompts(domain, params.prompt)
    source = resolve_source(spec.target, params.gguf_file)
    adapter = adapter_folder(params.adapter)
    lora = None if adapter is None else LoRARequest("adapter", 1, str(adapter))
    folder = converted_gguf(source) if source.gguf_file else source.folder
    llm, tokenizer = load_engine(folder, params, spec.target, loras=0 if lora is None else 1)
    return VLLMAgent(llm, params, game, tokenizer, eos_ids(folder, tokenizer), lora=lora)


def load_engine(folder: Path, params: VLLMParams, label: str, loras: int = 0) -> tuple[Any, Any]:
    """A vLLM engine on the checkpoint `folder` and the tokenizer `hf:` would use with it.
    `loras`: how many LoRA adapters one batch may mix (0: LoRA off)."""
    vllm = import_vllm()
    from ibrl_bench.models.loading import load_tokenizer

    tokenizer = load_tokenizer(folder, label)
    lora: dict[str, Any] = {}
    if loras:
        rank = next((r for r in LORA_RANKS if r >= params.max_lora_rank), None)
        if rank is None:
            raise UserError(f"max_lora_rank={params.max_lora_rank} is above the largest LoRA rank vLLM serves "
                            f"({LORA_RANKS[-1]})")
        lora = {"enable_lora": True, "max_loras": loras, "max_lora_rank": rank}
    from vllm.platforms import current_platform

    dtype = params.dtype
    if current_platform.is_cpu():
        # vLLM's "auto" is bfloat16 on a CPU; hf: runs float32 there, and so do the trainers, whose
        # ratio compares these log-probabilities with their own.
        dtype = "float32" if dtype == "auto" else dtype
        # The engine in this process: on a CPU a separate engine and worker process each import
        # torch and vLLM again (twice the start-up, 80 s instead of 40 s on 2 cores) and need the
        # caller's main module guarded against re-import (spawn).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    kv = {} if params.kv_cache_gb is None else {"kv_cache_memory_bytes": int(params.kv_cache_gb * 2**30)}
    try:
        llm = vllm.LLM(
            model=str(folder),
            skip_tokenizer_init=True,  # prompts go in as ids and replies are decoded here
            dtype=dtype,
            seed=0,
            gpu_memory_utilization=params.gpu_memory_utilization,
            max_model_len=params.max_model_len,
            tensor_parallel_size=params.tensor_parallel_size,
            enforce_eager=params.enforce_eager,
            logprobs_mode="processed_logprobs",
            **lora,
            **kv,
        )
    except (OSError, ValueError, RuntimeError) as e:  # a folder vLLM cannot read, an unsupported architecture
        lines = str(e).strip().splitlines()
        raise UserError(f"vLLM cannot load {label}: {lines[0] if lines else type(e).__name__}") from None
    return llm, tokenizer


class VLLMAgent(BatchedAgent):
    def __init__(
        self,
        llm: Any,
        params: VLLMParams,
        domain: Domain,
        tokenizer: Any,
        stop_ids: list[int],
        lora: Any = None,
        trace: bool = False,
        adapters: Mapping[str, Any] | None = None,
    ):
        from vllm import SamplingParams

        self.llm = llm
        self.sampling_params = SamplingParams
        self.lora = lora
        # role -> LoRARequest; a live mapping that the trainer updates between rollouts
        self.adapters = adapters
        self.trace = trace
        self.params = params
        self.domain = domain
        self.prompt = params.prompt
        self.tokenizer = tokenizer
        self.eos_ids = stop_ids
        self.prompt_budget = prompt_budget(params.max_model_len or _engine_max_len(llm), params.max_new_tokens)
        self.batcher: Batcher[GenRequest, GenResult] = Batcher(
            self.generate_batch, params.batch_size, params.window_ms / 1000
        )

    def generate_batch(self, requests: list[GenRequest]) -> list[GenResult]:
        """One `LLM.generate` call for the batch, in the batcher's worker thread (the only thread
        that touches the tokenizer)."""
        from ibrl_bench.models.chat_template import prompt_ids, reply_length

        p = self.params
        prompts = [prompt_ids(self.tokenizer, r.messages, self.prompt_budget) for r in requests]
        sampling = [
            self.sampling_params(
                temperature=p.temperature,
                top_p=p.top_p,
                max_tokens=p.max_new_tokens,
                seed=r.seed if p.temperature > 0 else None,
                stop_token_ids=self.eos_ids,
                detokenize=False,
                logprobs=0 if self.trace else None,  # 0: the sampled token's only
            )
            for r in requests
        ]
        lora = self.lora if self.adapters is None else [self.adapters[r.role] for r in requests]
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts], sampling, use_tqdm=False, lora_request=lora
        )
        results = []
        for ids, out in zip(prompts, outputs, strict=True):  # vLLM returns outputs in the order of the prompts
            completion = out.outputs[0]
            row = list(completion.token_ids)
            # vLLM ends a sequence on its stop id and keeps it; cut at the first one all the same.
            n = reply_length(row, self.eos_ids)
            text = self.tokenizer.decode(row[:n], skip_special_tokens=True).strip()
            trace = None
            if self.trace:
                logprobs = [step[t].logprob for step, t in zip(completion.logprobs, row[:n], strict=False)]
                trace = Trace(prompt_ids=list(ids), completion_ids=row[:n], logprobs=logprobs)
            results.append(GenResult(text=text, prompt_tokens=len(ids), completion_tokens=n, trace=trace))
        return results

    async def aclose(self) -> None:
        await super().aclose()
        shutdown_engine(self.llm)


def shutdown_engine(llm: Any) -> None:
    """Free an engine's process and memory now, once (a second call does nothing). vLLM's LLM has
    no close of its own: its engine client shuts the engine down when it is garbage collected, and
    on a CPU, where the engine runs in this process, that shutdown also tears down the process's
    distributed state, under whichever engine was started since."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if callable(getattr(client, "shutdown", None)):
        client.shutdown()


def eos_ids(folder: Path, tokenizer: Any) -> list[int]:
    """The ids that end a reply, as `hf:` finds them: the generation config's, plus the tokenizer's."""
    from transformers import GenerationConfig

    try:
        ids = GenerationConfig.from_pretrained(folder, local_files_only=True).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's alone
        ids = None
    return end_ids(ids, tokenizer)


def _engine_max_len(llm: Any) -> int | None:
    # Not a documented attribute; without it prompts are not cut, and vLLM rejects overlong ones.
    try:
        return int(llm.llm_engine.model_config.max_model_len)
    except (AttributeError, TypeError, ValueError):
        return None
