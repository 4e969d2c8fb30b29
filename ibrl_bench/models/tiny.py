"""Tiny causal language models built from a config, for tests and the trainers' smoke runs.

`build_tiny_model(folder)` writes a complete checkpoint (config, random weights, tokenizer with a
chat template) that `hf:FOLDER` loads like any other, with no download. The tokenizer is built in
code: byte-level, so any text round-trips, with three ChatML control tokens. The weights are
random (seeded), so the model writes gibberish; what matters is that every path of the harness
(templates, batching, padding, adapters, gradients) runs on a real transformers model in seconds.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

# ChatML, the format of SmolLM2 and Qwen: `<|im_start|>ROLE\nTEXT<|im_end|>\n` per message.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
BOS, EOS, PAD = "<|im_start|>", "<|im_end|>", "<|pad|>"


class TinyConfig(BaseModel):
    """The shape of a tiny Llama-architecture model (about 100k parameters at the defaults)."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(64, ge=8)
    intermediate_size: int = Field(128, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    # Room for the Deal-or-NoDeal prompt (about 1,000 bytes) and a full dialogue at one token a byte.
    max_position_embeddings: int = Field(4096, ge=16)
    # Large enough that greedy decoding writes varied bytes: at the usual 0.02 the tied embeddings
    # dominate and the model repeats the last prompt token ("\n") forever.
    initializer_range: float = Field(0.3, gt=0)


def build_tokenizer():
    """A byte-level tokenizer made in memory: 256 byte tokens, no merges, ChatML control tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 printable stand-ins for bytes
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, chat_template=CHATML_TEMPLATE
    )
    return tokenizer


def build_tiny_model(folder: str | Path, seed: int = 0, config: TinyConfig | None = None, **shape) -> Path:
    """Write a randomly initialized tiny Llama model and its tokenizer to `folder`; return it.

    The same seed and shape give the same weights (on the same torch version). Shape fields of
    `TinyConfig` may be passed as keywords: `build_tiny_model(path, num_hidden_layers=1)`.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    shape_config = config or TinyConfig(**shape)
    tokenizer = build_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (("bos", BOS), ("eos", EOS), ("pad", PAD))}
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        tie_word_embeddings=True,
        **shape_config.model_dump(),
    )
    # The initializer draws from torch's global generator; fork it so callers' RNG is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"]
    )
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
