"""Tiny causal language models built from a config, for tests and the trainers' smoke runs.

`build_tiny_model(folder)` writes a complete checkpoint (config, random weights, tokenizer with a
chat template) that `hf:FOLDER` loads like any other, with no download. The tokenizer is built in
code: a byte-level BPE (any text round-trips) trained in memory on the short text below, so that
game prompts take about one token per 3.4 characters, as with real tokenizers, rather than one per
byte; plus three ChatML control tokens. The weights are random (seeded), so the model writes
gibberish; what matters is that every path of the harness (templates, batching, padding, adapters,
gradients) runs on a real transformers model in seconds.
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
VOCAB_SIZE = 1024  # an upper bound: the merges this text supports run out at about 630 tokens

# What the tokenizer learns its merges from: the language of the games (rules, offers, move tags).
CORPUS = """You are negotiating in a game against another player. The pool holds books, hats and balls.
You and the other player must agree how to divide it; each item goes to one of you. Your private values
per item are known only to you. The whole pool is worth exactly ten to you. If you do not agree, both of
you score zero. Your goal is the highest total value for yourself. Rules: you take turns sending short
messages; the talk ends after a number of messages in total. To make an offer, include a proposal listing
the items you would take. To accept the offer on the table and end the talk, include a selection.
After the talk each player privately states the items it takes. The deal holds only if the two splits
add up exactly to the pool. No deal declines. Write only your next message, one or two sentences.
How about this: I take the books and the hat and you take the ball? I propose book=1 hat=2 ball=0.
That works for me, deal. I would rather keep the hats. Can you give me one more book? No, I need both
balls. Fine, you can have the books if I get the hats. Let us split it evenly. What do you value most?
The seller offers a car to the buyer; the buyer asks about the price, the budget, the test drive and
the warranty. Thank you, that sounds good. I agree. I do not agree. Maybe later. Yes. No.
<propose>book=0 hat=1 ball=2</propose> <selection> <split>book=3 hat=0 ball=1</split> <split>no deal</split>
0 1 2 3 4 5 6 7 8 9 10
"""


class TinyConfig(BaseModel):
    """The shape of a tiny Llama-architecture model (about 150k parameters at the defaults)."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(64, ge=8)
    intermediate_size: int = Field(128, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    # Room for a Deal-or-NoDeal prompt (about 300 tokens) and a long dialogue.
    max_position_embeddings: int = Field(2048, ge=16)
    # Large enough that greedy decoding writes varied bytes: at the usual 0.02 the tied embeddings
    # dominate and the model repeats the last prompt token ("\n") forever.
    initializer_range: float = Field(0.3, gt=0)


def build_tokenizer():
    """A byte-level BPE tokenizer trained in memory on CORPUS, with ChatML control tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    # The full byte alphabet first, so that text the corpus never showed still encodes.
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    core.train_from_iterator([CORPUS], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, chat_template=CHATML_TEMPLATE
    )


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
