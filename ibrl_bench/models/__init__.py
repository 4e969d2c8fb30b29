"""Local language models: loading checkpoints for the `hf:` backend, and tiny models for tests.

The modules here import torch and transformers (inside functions where the module is also used
without them), so nothing in the core imports this package; the `hf:` and `vllm:` backends and
the trainers do, when a spec or recipe asks for them.

OpenMP threads sleep when idle instead of busy-waiting, unless the user chose otherwise. Models
here decode in a worker thread beside the asyncio event loop, and HF `generate` runs much Python
between its parallel regions; spinning worker threads then take the cores that the event loop and
the decode loop itself need. On 2 cores the hf tests ran in 63 s spinning and 37 s sleeping. The
variable is read once, when torch loads its OpenMP runtime, so this package must be imported
before torch (the backends and the tests do so).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
