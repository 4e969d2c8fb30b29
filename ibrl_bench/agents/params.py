"""Spec parameters (`?key=value&...`): every backend declares them as a pydantic model, and
`parse_params` is the one place they are checked.

A bad parameter is one line that names it and lists the valid ones with their types and defaults:

    unknown parameter 'temprature' for openai:gpt@URL; valid parameters: temperature: float = 0.7, ...

The models live here, away from the backends' modules, so that reading or checking a spec never
imports torch, vllm, openai or litellm. A `python:` plugin's factory declares its parameters by its
signature, which `signature_model` turns into the same kind of model.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from ibrl_bench.agents.remote import RemoteSettings
from ibrl_bench.domains.base import DEFAULT_PROMPT
from ibrl_bench.errors import UserError

P = TypeVar("P", bound=BaseModel)


class Params(BaseModel):
    """The base of every backend's parameter model: unknown names are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_params(model: type[P], params: Mapping[str, Any], what: str) -> P:
    """`params` as `model`, or one UserError line naming the bad parameter and the valid ones."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        valid = describe(model)
        if err["type"] == "extra_forbidden":
            raise UserError(f"unknown parameter {name!r} for {what}; valid parameters: {valid}") from None
        message = str(err["msg"]).removeprefix("Value error, ")
        if name not in params:  # a rule across parameters (a model validator)
            raise UserError(f"bad parameters for {what}: {message}; valid parameters: {valid}") from None
        raise UserError(f"bad parameter {name}={params[name]!r} for {what}: {message}; "
                        f"valid parameters: {valid}") from None


def describe(model: type[BaseModel]) -> str:
    """`name: type = default, ...` of a parameter model, or "none"."""
    parts = []
    for name, field in model.model_fields.items():
        text = f"{name}: {_type_name(field.annotation)}"
        if not field.is_required():
            text += f" = {field.default!r}"
        parts.append(text)
    return ", ".join(parts) or "none"


def _type_name(annotation: Any) -> str:
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return re.sub(r"\btyping\.|<class '([^']+)'>", lambda m: m.group(1) or "", str(annotation))


def signature_model(factory: Any, name: str) -> type[BaseModel] | None:
    """A parameter model read from `factory`'s signature (its keyword parameters, their annotations
    and defaults); None when the factory takes any keyword (**kwargs) or has no signature."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C type without one: the call says what is wrong
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    try:
        hints = typing.get_type_hints(factory.__init__ if inspect.isclass(factory) else factory)
    except Exception:  # noqa: BLE001 - annotations that do not resolve: take any value
        hints = {}
    fields = {}
    for p in signature.parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        annotation = hints.get(p.name, Any)
        fields[p.name] = (annotation, ... if p.default is p.empty else p.default)
    return create_model(f"{name}Params", __base__=Params, **fields)


# --- the model backends' parameters --------------------------------------------------------------

class GenerationParams(Params):
    """Parameters common to the local backends (`hf:`, `vllm:`); each backend adds its own."""

    max_new_tokens: int = Field(64, ge=1, le=8192)  # a move is one or two sentences, or one split
    temperature: float = Field(0.0, ge=0)  # 0 = greedy
    top_p: float = Field(1.0, gt=0, le=1)
    batch_size: int = Field(8, ge=1, le=1024)  # requests decoded together, at most
    window_ms: float = Field(5.0, ge=0, le=10_000)  # how long the oldest request waits for company
    adapter: str | None = None  # a PEFT (LoRA) adapter folder
    prompt: str = DEFAULT_PROMPT  # which of the domain's versioned role prompts the model reads


_DEVICE = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


class DeviceParams(Params):
    device: str = "auto"

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE.match(v):
            raise ValueError("device must be auto, cpu, cuda or cuda:N")
        return v


class HFParams(GenerationParams, DeviceParams):
    """`hf:PATH?...`: a transformers model in this process (agents/hf_local.py)."""

    gguf_file: str | None = None  # which .gguf file, when a folder or package holds several
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    prefix_cache: int = Field(32, ge=0)  # dialogues whose keys and values are kept; 0: none


class VLLMParams(GenerationParams):
    """`vllm:PATH?...`: a vLLM engine in this process (agents/vllm_local.py)."""

    gguf_file: str | None = None  # which .gguf file, when a folder or package holds several
    batch_size: int = Field(64, ge=1, le=4096)  # vLLM schedules large batches well
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # on a CPU: the share of the RAM
    kv_cache_gb: float | None = Field(None, gt=0)  # a fixed KV cache size instead of the share above
    max_model_len: int | None = Field(None, ge=32)
    tensor_parallel_size: int = Field(1, ge=1)
    max_lora_rank: int = Field(64, ge=1)
    enforce_eager: bool = False


class ChatSampling(Params):
    """How the chat-API backends (`openai:`, `litellm:`) sample a reply."""

    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(256, ge=1)
    send_seed: bool = False  # pass the episode seed to endpoints that honour `seed`


class Pricing(BaseModel):
    input_per_mtok: float = 0.0  # USD per million prompt tokens
    output_per_mtok: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


class ChatParams(ChatSampling, RemoteSettings):
    """`openai:MODEL@URL?...` and `litellm:PROVIDER/MODEL?...`: sampling, transport (agents/remote.py),
    pricing, and where the key is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    price_in: float = Field(0.0, ge=0)  # USD per million prompt tokens
    price_out: float = Field(0.0, ge=0)
    key_env: str | None = None  # the NAME of the variable holding the key; none: a server without keys
    observation: bool = False  # test hook: the observation travels with the request (testing/fake_openai.py)

    def sampling(self) -> ChatSampling:
        return ChatSampling(**self.model_dump(include=set(ChatSampling.model_fields)))

    def settings(self) -> RemoteSettings:
        return RemoteSettings(**self.model_dump(include=set(RemoteSettings.model_fields)))

    def pricing(self) -> Pricing:
        return Pricing(input_per_mtok=self.price_in, output_per_mtok=self.price_out)
