"""Local language models: loading checkpoints for the `hf:` backend, and tiny models for tests.

Everything here imports torch and transformers, so nothing in the core imports this package;
the `hf:` and `vllm:` backends and the trainers do, when a spec or recipe asks for them.
"""
