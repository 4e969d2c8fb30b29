"""One training run of `ibrl-bench train METHOD`: the resolved recipe written beside the output,
the trainer run under its step log, and what a refused run puts back.

Under `accelerate launch` (or torchrun) every process trains; only the first (RANK 0) writes the
recipe and the log. Torch is imported by the trainers inside `run`, not here.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.train import resume
from ibrl_bench.train.recipes import RECIPE_VERSION

# What the trainers import (the [train] extra); torch first, since pip installs it separately.
TRAINING_PACKAGES = ("torch", "transformers", "peft", "accelerate")


def ready_training_stack() -> None:
    """One line naming what is missing, before a trainer's first import fails with a traceback;
    then transformers' loading and saving bars off (they would tear through the step bar)."""
    missing = [name for name in TRAINING_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"training needs {', '.join(missing)}, which this environment lacks; install them with "
                        "pip install torch && pip install 'ibrl-bench[train]'")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def main_process() -> bool:
    """False in the processes after the first under `accelerate launch` (or torchrun), which set RANK."""
    return int(os.environ.get("RANK", "0")) == 0


class NoLog:
    """The log of a process other than the first under accelerate: the first one writes."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def log(self, step: int, **metrics) -> None:
        return None


class Launch:
    """A training about to start in `config.out`; creating it writes the resolved recipe.yaml."""

    def __init__(self, method: str, config: BaseModel):
        self.method, self.config = method, config
        self.out = Path(config.out)
        self.main_process = main_process()
        # Refuses another recipe's state, before anything is written.
        self.resumed_after = resume.saved_step(config) if method != "sft" else 0
        self.recipe_path = self.out / "recipe.yaml"
        # What a refusal inside the trainer (a bad role, a run folder of another domain) puts back.
        self._created = next((p for p in reversed([self.out, *self.out.parents]) if not p.exists()), None)
        path = self.recipe_path
        self._earlier = (path.read_bytes(), path.stat()) if path.is_file() else None
        if self.main_process:
            self._write_recipe()

    def _write_recipe(self) -> None:
        from ibrl_bench.domains import get_domain

        try:
            self.out.mkdir(parents=True, exist_ok=True)
            resolved = {"version": RECIPE_VERSION, "method": self.method, **self.config.model_dump(mode="json")}
            # The wording behind the prompt's name, as run manifests record it (a comment: the file stays a recipe).
            role_prompt = get_domain(self.config.domain).role_prompt(self.config.prompt)
            self.recipe_path.write_text(f"# role prompt {role_prompt.name}: {role_prompt.id}\n"
                                        + yaml.safe_dump(resolved, sort_keys=False))
        except OSError as e:
            raise UserError(f"cannot write the training output folder {self.out}: {e.strerror}; set out= to a "
                            "folder you can write to") from None

    def run(self, module: Any, quiet: bool, console: Any) -> dict[str, str]:
        """`module.run(config, log)`; the specs it trained, by role (or "policy" for one policy)."""
        from ibrl_bench.train.steplog import StepLog

        step_log = (StepLog(self.out, self.config.steps, self.method, quiet=quiet, console=console,
                            resume_after=self.resumed_after) if self.main_process else NoLog())
        try:
            with step_log as log:
                result = module.run(self.config, log)
        except UserError:
            if self.main_process and step_log.undo():
                self._put_back()
            raise
        return {"policy": result} if isinstance(result, str) else dict(result)

    def _put_back(self) -> None:
        """Undo the writes of a training refused before its first step: the recipe.yaml it replaced
        (bytes and times), and the folders it created (when they hold nothing else)."""
        if self._earlier is not None:
            self.recipe_path.write_bytes(self._earlier[0])
            os.utime(self.recipe_path, ns=(self._earlier[1].st_atime_ns, self._earlier[1].st_mtime_ns))
        else:
            self.recipe_path.unlink(missing_ok=True)
        if self._created is None:
            return
        for folder in [self.recipe_path.parent, *self.recipe_path.parent.parents]:
            try:
                folder.rmdir()
            except OSError:
                return
            if folder == self._created:
                return


def try_commands(domain: str, method: str, specs: dict[str, str], max_new_tokens: int) -> list[str]:
    """`ibrl-bench crossplay` commands that play each checkpoint against the held-out panel, with
    the message length it was trained to (the hf: default is 64 tokens)."""
    from ibrl_bench.domains import get_domain
    from ibrl_bench.runner.matrix import heldout_panel

    roles = get_domain(domain).roles
    lines = []
    for who, spec in specs.items():
        spec += f"{'&' if '?' in spec else '?'}max_new_tokens={max_new_tokens}"
        # A role's checkpoint plays that role; one policy for all roles (SFT) plays each of them,
        # in one command where every role meets the same panel (Deal-or-NoDeal).
        played = [who] if who in roles else list(roles)
        panels = {heldout_panel(domain, role) for role in played}
        seats = [(None, panels.pop())] if len(panels) == 1 and len(played) > 1 else \
            [(role, heldout_panel(domain, role)) for role in played]
        for role, panel in seats:
            role_flag = f" --role {role}" if role else ""
            lines.append(f"ibrl-bench crossplay --domain {domain} --policy {shlex.quote(spec)}{role_flag} "
                         f"--panel {panel} --scenarios 20 --out runs/{domain}-{method}-{who}"
                         + (f"-{role}" if role and role != who else ""))
    return lines
