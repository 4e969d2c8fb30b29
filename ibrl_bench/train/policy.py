"""A trainable policy: a causal LM (or one LoRA adapter on a shared frozen base), its optimizer,
the frozen reference it is regularized towards, and a `save` that cross-play can load.

    policy = load_policy(ModelOptions(model="hf:/path/to/base", lora=LoraOptions()), lr=1e-5)
    policy.model          # the module to run forward and backward (with this policy's adapter on)
    policy.tokenizer      # its tokenizer (left-padded for generation, as models/loading.py sets it)
    policy.optimizer      # AdamW over this policy's trainable parameters only
    with policy.active(): ...       # makes this policy's adapter the one the shared model runs
    with policy.reference() as ref: ref(input_ids=...)   # the frozen reference policy
    spec = policy.save(folder)      # "hf:FOLDER" or "hf:BASE?adapter=FOLDER"

Two policies (IB-RL's two roles) come from `load_policies(options, ["a", "b"], lr)`:
- with LoRA and `shared_base=True` (the default): ONE frozen base model with two adapters named
  after the roles. Each policy's optimizer holds only its own adapter's parameters, and PEFT's
  `set_adapter` makes the other adapter not trainable while one is active, so a role's backward
  can neither reach nor move the other role's parameters. The reference is the base with adapters
  disabled; no extra memory.
- without LoRA: two full copies of the model, plus one frozen copy as the reference (loaded only
  when `reference=True`, i.e. when the KL coefficient is not 0).

Models are loaded through models/loading.py (folders, .gguf, package:NAME, the local HF cache; an
`?adapter=` on the model spec warm-starts from that adapter). Dropout stays off (eval mode) during
training: the importance ratio must compare the policy with itself, not with a noisy copy of it.
(With gradient checkpointing, which transformers runs only in training mode, the model is put in
training mode with every dropout probability set to 0.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ibrl_bench.domains.base import DEFAULT_PROMPT
from ibrl_bench.errors import UserError


class LoraOptions(BaseModel):
    """LoRA (Hu et al. 2021) on the linear layers of the base model."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    # Written into the adapter's config; the trainers here run dropout-free whatever it says (the
    # module docstring says why), so it matters only to whoever trains the adapter further.
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"


class ModelOptions(BaseModel):
    """Which model to train and how; the `model` block of a training recipe."""

    model_config = ConfigDict(extra="forbid")

    model: str  # an hf: spec (or its bare target): hf:PATH[?adapter=DIR&gguf_file=NAME]
    lora: LoraOptions | None = None  # None: every weight is trained
    shared_base: bool = True  # with LoRA and several policies: one base, one adapter per policy
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    device: str = "auto"  # the RL trainers replace it with accelerate's device for this process
    gradient_checkpointing: bool = False  # trade compute for memory on large models


@dataclass
class Policy:
    name: str  # the role it plays
    model: Any  # PreTrainedModel, or PeftModel (shared with the other policies when shared_base)
    tokenizer: Any
    optimizer: Any
    base_target: str  # the hf: target of the base model, for the spec of a saved adapter
    base_params: dict[str, Any] = field(default_factory=dict)  # gguf_file etc., carried into specs
    adapter: str | None = None  # the PEFT adapter name when LoRA ("policy_ROLE")
    reference_model: Any | None = None  # frozen copy (full fine-tuning only); LoRA uses the base
    _trainable: list[Any] = field(default_factory=list)
    warm_adapter: str | None = None  # the adapter merged into the base at load (?adapter= of the model)

    def parameters(self) -> list[Any]:
        """The tensors this policy's optimizer updates (and nothing else)."""
        return self._trainable

    def generation_model(self) -> Any:
        """The model to call `generate` on: the one inside any accelerate/DDP wrapper."""
        return _unwrap(self.model)

    @contextmanager
    def active(self) -> Iterator[Any]:
        """Run the model as this policy: its adapter on, every other adapter off and frozen."""
        if self.adapter is not None:
            _peft(self.model).set_adapter(self.adapter)
        yield self.model

    @contextmanager
    def reference(self) -> Iterator[Any]:
        """The frozen reference policy (the model as loaded, before any update), without grad."""
        import torch

        if self.adapter is not None:
            ctx = _peft(self.model).disable_adapter()
            model = self.model
        elif self.reference_model is not None:
            ctx, model = nullcontext(), self.reference_model
        else:
            raise RuntimeError(f"policy {self.name} was loaded without a reference model")
        with ctx, torch.no_grad():
            yield model

    def save(self, folder: str | Path, state: dict[str, Any] | None = None) -> str:
        """Write a checkpoint that `build_agent` loads as an hf: agent; return that spec.

        `state`: the model's whole state dict when the model itself holds only shards (FSDP:
        fsdp.full_state), else None (read from the model).

        Full fine-tuning writes a whole HF folder (weights, config, tokenizer): `hf:FOLDER`.
        LoRA writes this policy's adapter alone (adapter_config.json + adapter_model.safetensors,
        plus the tokenizer for convenience): `hf:BASE?adapter=FOLDER`, BASE the model trained on;
        but when training started from a warm-start adapter, the whole merged model: `hf:FOLDER`.
        """
        folder = Path(folder).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        model = _unwrap(self.model)
        if self.adapter is None:
            model.save_pretrained(folder, state_dict=state)
            self.tokenizer.save_pretrained(folder)
            return _spec(str(folder), {})  # plain safetensors, whatever the base was read from
        if self.warm_adapter is None:
            self._save_adapter(model, folder, state)
            return _spec(self.base_target, {**self.base_params, "adapter": str(folder)})
        # The base trained on (base + warm-start adapter, merged) is on no disk: write the whole
        # model, base + warm start + this adapter merged, built on the CPU from the files.
        import tempfile

        from peft import PeftModel

        from ibrl_bench.models.loading import dtype_name, load_model, resolve_source

        dtype = dtype_name(model)
        with tempfile.TemporaryDirectory() as tmp:
            self._save_adapter(model, Path(tmp), state)
            source = resolve_source(self.base_target, self.base_params.get("gguf_file"))
            merged = load_model(source, self.warm_adapter, "cpu", dtype).model.merge_and_unload()
            merged = PeftModel.from_pretrained(merged, tmp).merge_and_unload()
        merged.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        return _spec(str(folder), {})

    def save_adapter(self, folder: str | Path) -> Path:
        """This policy's LoRA adapter alone (config and weights, no tokenizer), as PEFT and vLLM
        load it; for the vLLM rollout engine, which reloads it after every update."""
        if self.adapter is None:
            raise RuntimeError(f"policy {self.name} has no adapter")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._save_adapter(_unwrap(self.model), folder, tokenizer=False)
        return folder

    def lora_rank(self) -> int | None:
        return None if self.adapter is None else int(_peft(self.model).peft_config[self.adapter].r)

    def _save_adapter(self, model: Any, folder: Path, state: dict[str, Any] | None = None,
                      tokenizer: bool = True) -> None:
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        peft = _peft(model)
        # Saved by hand rather than with save_pretrained(selected_adapters=...), which puts every
        # adapter but "default" in a subfolder named after it; `?adapter=` wants the folder itself.
        state = get_peft_model_state_dict(peft, state_dict=state, adapter_name=self.adapter)
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, folder / "adapter_model.safetensors")
        peft.peft_config[self.adapter].save_pretrained(folder)
        if tokenizer:
            self.tokenizer.save_pretrained(folder)


def load_policy(options: ModelOptions, lr: float, name: str = "default", reference: bool = True,
                **optim: Any) -> Policy:
    """One trainable policy (SFT, unilateral RL). `optim` goes to AdamW (weight_decay, betas...)."""
    return load_policies(options, [name], lr, reference=reference, **optim)[name]


def load_policies(
    options: ModelOptions, names: list[str], lr: float, reference: bool = True, **optim: Any
) -> dict[str, Policy]:
    """One trainable policy per name, all starting from the same model (see the module docstring).

    A model spec with `?adapter=DIR` (e.g. an SFT run with LoRA) starts from that adapter merged
    into the base: it is the starting policy and the reference; new LoRA adapters go on top.
    """
    import torch

    from ibrl_bench.models.loading import load_model

    if len(set(names)) != len(names) or not names:
        raise ValueError(f"policy names must be distinct and not empty: {names}")
    target, params = _parse_model(options.model)
    warm = params.get("adapter")
    first = load_model(params["source"], warm, options.device, options.dtype)
    base_params = {k: v for k, v in params.items() if k in ("gguf_file",)}
    # Rollouts go through HFAgent (left padding); training batches are built by `collate`, which
    # pads on the right by itself, so the tokenizer's setting is the generator's.
    tokenizer = first.tokenizer
    copies = [first.model]

    def start() -> Any:
        """One more copy of the starting model, warm-start adapter merged in, every weight plain."""
        model = copies.pop() if copies else load_model(params["source"], warm, options.device, options.dtype).model
        if warm is not None:
            model = model.merge_and_unload()
        return model

    def optimizer(trainable: list[Any]) -> Any:
        return torch.optim.AdamW(trainable, lr=lr, **optim)

    policies: dict[str, Policy] = {}
    if options.lora is None:
        trained = [start() for _ in names]
        frozen = start().requires_grad_(False) if reference else None
        for name, model in zip(names, trained, strict=True):
            model.requires_grad_(True)
            _prepare_for_training(model, options)
            trainable = list(model.parameters())
            policies[name] = Policy(name, model, tokenizer, optimizer(trainable), target, base_params, None, frozen,
                                    trainable, warm)
        return policies

    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=options.lora.r,
        lora_alpha=options.lora.alpha,
        lora_dropout=options.lora.dropout,
        target_modules=options.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    # Adapter names are "policy_ROLE": PEFT warns about (and can mis-load) names that occur
    # inside its "lora_" prefix, as the role "a" does.
    groups = [names] if options.shared_base else [[n] for n in names]
    for group in groups:
        base = start().requires_grad_(False)
        # Each adapter is created with the same seeded init, so the roles start from one policy.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = get_peft_model(base, lora, adapter_name=_adapter_name(group[0]))
        for name in group[1:]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model.add_adapter(_adapter_name(name), lora)
        _prepare_for_training(model, options)
        for name in group:
            adapter = _adapter_name(name)
            trainable = [p for n, p in model.named_parameters() if f".{adapter}." in n and "lora_" in n]
            if not trainable:
                raise UserError(f"LoRA found no layers to adapt in {options.model} "
                                f"(target_modules={options.lora.target_modules})")
            for p in trainable:
                p.requires_grad_(True)
            policies[name] = Policy(name, model, tokenizer, optimizer(trainable), target, base_params, adapter, None,
                                    trainable, warm)
    return policies


def _adapter_name(role: str) -> str:
    return f"policy_{role}"


def _prepare_for_training(model: Any, options: ModelOptions) -> None:
    if not options.gradient_checkpointing:
        model.eval()  # no dropout: see the module docstring
        return
    # transformers checkpoints layers only in training mode, so the model goes to training mode
    # with every dropout set to 0: the forward stays the deterministic one the sampler used.
    _zero_dropout(model)
    model.train()
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()  # frozen embeddings would otherwise cut the graph


def _zero_dropout(model: Any) -> None:
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):  # attention layers keep a float of their own
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)


def _parse_model(model: str) -> tuple[str, dict[str, Any]]:
    """`hf:TARGET?adapter=...` (or bare TARGET) -> (TARGET, {source, adapter, gguf_file})."""
    from ibrl_bench.agents.spec import parse_spec
    from ibrl_bench.models.loading import resolve_source

    spec = parse_spec(model if model.startswith("hf:") else f"hf:{model}")
    if spec.kind != "hf":
        raise UserError(f"training needs an hf: model, not {model!r}")
    unknown = set(spec.params) - {"adapter", "gguf_file"}
    if unknown:
        raise UserError(f"{model}: training takes only ?adapter= and ?gguf_file=, not {', '.join(sorted(unknown))}")
    gguf_file = spec.params.get("gguf_file")
    params: dict[str, Any] = {"source": resolve_source(spec.target, gguf_file), "adapter": spec.params.get("adapter")}
    if gguf_file:
        params["gguf_file"] = gguf_file
    target = spec.target
    if Path(target).expanduser().exists():  # a folder or file: absolute, so saved specs work anywhere
        target = str(Path(target).expanduser().resolve())
    return target, params


def _spec(target: str, params: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    query = urlencode({k: v for k, v in params.items() if v is not None}, safe="/:")
    return f"hf:{target}" + (f"?{query}" if query else "")


def with_prompt(spec: str, prompt: str) -> str:
    """`spec` set to play with the role prompt `prompt` (nothing added for the default one)."""
    if prompt == DEFAULT_PROMPT:
        return spec
    return f"{spec}{'&' if '?' in spec else '?'}prompt={prompt}"


def _unwrap(model: Any) -> Any:
    """The model inside an accelerate/DDP wrapper."""
    return getattr(model, "module", model)


def _peft(model: Any) -> Any:
    return _unwrap(model)


def hf_model(model: Any) -> Any:
    """The transformers causal LM itself: inside any DDP wrapper and any PeftModel."""
    model = _unwrap(model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def describe(policies: dict[str, Policy]) -> str:
    """One line on what is trained, for logs."""
    first = next(iter(policies.values()))
    counts = {n: sum(p.numel() for p in pol.parameters()) for n, pol in policies.items()}
    return json.dumps({"adapters": first.adapter is not None, "trainable_params": counts})
