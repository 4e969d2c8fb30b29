"""`vllm:` agents: the vLLM offline engine, for GPU machines.

    vllm:PATH[?adapter=DIR&gguf_file=NAME&max_new_tokens=64&temperature=0&top_p=1&batch_size=64&window_ms=5
               &dtype=auto&gpu_memory_utilization=0.9&max_model_len=N&tensor_parallel_size=1]

PATH is resolved like `hf:` (a folder, a .gguf file, package:NAME, or a model id already in the
local Hugging Face cache; never downloaded); a GGUF is first converted to safetensors once, as
for `hf:`. Requests from concurrent episodes are gathered by the same batcher as `hf:` and each
batch goes to one `LLM.generate` call in a worker thread, with the same prompt tokens as `hf:`
(models/chat.py). vLLM seeds each request itself (`SamplingParams.seed`), from the same
per-request seed, so sampling does not depend on the batch. vLLM is imported only when a spec
names it, so the rest of the harness runs without it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ibrl_bench.agents.batching import Batcher
from ibrl_bench.agents.generation import (
    BatchedAgent,
    GenerationParams,
    GenRequest,
    GenResult,
    parse_params,
    require_prompts,
)
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains.base import Domain
from ibrl_bench.errors import UserError

INSTALL_HINT = (
    "vllm: agents need vLLM, which is not installed here; on a machine with an NVIDIA GPU run "
    "pip install 'ibrl-bench[vllm]' (best in its own virtual environment: vLLM pins its own torch)"
)


class VLLMParams(GenerationParams):
    gguf_file: str | None = None  # which .gguf file, when a folder or package holds several
    batch_size: int = Field(64, ge=1, le=4096)  # vLLM schedules large batches well
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=32)
    tensor_parallel_size: int = Field(1, ge=1)
    max_lora_rank: int = Field(64, ge=1)
    enforce_eager: bool = False


def from_spec(spec: AgentSpec, domain: str) -> VLLMAgent:
    params = parse_params(spec, VLLMParams)
    try:
        import vllm
        from vllm.lora.request import LoRARequest
    except ModuleNotFoundError:
        raise UserError(INSTALL_HINT) from None
    from ibrl_bench.models.loading import adapter_folder, converted_gguf, resolve_source

    game = require_prompts(domain)
    source = resolve_source(spec.target, params.gguf_file)
    adapter = adapter_folder(params.adapter)
    lora = None if adapter is None else LoRARequest("adapter", 1, str(adapter))
    try:
        folder = converted_gguf(source) if source.gguf_file else source.folder
        llm = vllm.LLM(
            model=str(folder),
            tokenizer=str(folder),
            dtype=params.dtype,
            seed=0,
            gpu_memory_utilization=params.gpu_memory_utilization,
            max_model_len=params.max_model_len,
            tensor_parallel_size=params.tensor_parallel_size,
            enforce_eager=params.enforce_eager,
            enable_lora=lora is not None,
            max_lora_rank=params.max_lora_rank,
        )
    except (OSError, ValueError) as e:  # a folder vLLM cannot read, an unsupported architecture
        lines = str(e).strip().splitlines()
        raise UserError(f"vLLM cannot load {spec.target}: {lines[0] if lines else type(e).__name__}") from None
    return VLLMAgent(llm, vllm.SamplingParams, lora, params, game)


class VLLMAgent(BatchedAgent):
    def __init__(self, llm: Any, sampling_params: type, lora: Any, params: VLLMParams, domain: Domain):
        self.llm = llm
        self.sampling_params = sampling_params
        self.lora = lora
        self.params = params
        self.domain = domain
        self.tokenizer = llm.get_tokenizer()
        max_len = params.max_model_len or _engine_max_len(llm)
        self.prompt_budget = None if max_len is None else max_len - params.max_new_tokens
        self.batcher: Batcher[GenRequest, GenResult] = Batcher(
            self.generate_batch, params.batch_size, params.window_ms / 1000
        )

    def generate_batch(self, requests: list[GenRequest]) -> list[GenResult]:
        """One `LLM.generate` call for the batch, in the batcher's worker thread."""
        from ibrl_bench.models.chat import prompt_ids

        p = self.params
        prompts = [prompt_ids(self.tokenizer, r.messages, self.prompt_budget) for r in requests]
        sampling = [
            self.sampling_params(
                temperature=p.temperature,
                top_p=p.top_p,
                max_tokens=p.max_new_tokens,
                seed=r.seed if p.temperature > 0 else None,
                skip_special_tokens=True,
            )
            for r in requests
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts], sampling, use_tqdm=False, lora_request=self.lora
        )
        results = []
        for ids, out in zip(prompts, outputs):  # vLLM returns outputs in the order of the prompts
            completion = out.outputs[0]
            results.append(GenResult(text=completion.text.strip(), prompt_tokens=len(ids),
                                     completion_tokens=len(completion.token_ids)))
        return results



def _engine_max_len(llm: Any) -> int | None:
    # Not a documented attribute; without it prompts are not cut, and vLLM rejects overlong ones.
    try:
        return int(llm.llm_engine.model_config.max_model_len)
    except (AttributeError, TypeError, ValueError):
        return None
