"""Hostile input: every bad input ends with one line, a non-zero exit and nothing written; a
blocking agent or a YAML bomb cannot hang a command; no key reaches the terminal; retries are
recorded; a stopped run stops at once and counts what it holds.

The table runs the command line in this process (`cli.main(argv)`, as the `ibrl-bench` script
does), since a process per case would cost seconds of imports each; a few cases run as real
processes, for the exit status and the absence of a traceback as a user sees them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from cli_helpers import CliResult, run_in_process, run_process

TESTS = Path(__file__).parent
FAIR, BOULWARE, CONCEDER, HARDLINER = (f"scripted:dealnodeal/{n}"
                                       for n in ("fair", "boulware", "conceder", "hardliner"))


# ---------------------------------------------------------------- the world the cases run in

def _bomb(levels: int = 9, width: int = 10) -> str:
    lines = ["  l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


CARD = "version: 1\nid: {id}\nbackend: scripted\nmodel: boulware\ndomains: [dealnodeal]\n"
PANEL = "version: 1\nname: {name}\ndomain: dealnodeal\nmembers: [scripted:dealnodeal/boulware]\n"


def _cards(cp: Path) -> None:
    (cp / "panels").mkdir(parents=True)
    (cp / "latin.yaml").write_bytes(CARD.format(id="latin").encode() + b"description: caf\xe9\n")
    (cp / "bomb.yaml").write_text(CARD.format(id="bomb") + "params:\n" + _bomb())
    (cp / "recursive.yaml").write_text(CARD.format(id="recursive") + "params: &p {a: *p}\n")
    (cp / "deep.yaml").write_text(CARD.format(id="deep") + "params: " + "{a: " * 200 + "1" + "}" * 200 + "\n")
    (cp / "big.yaml").write_text(CARD.format(id="big") + "description: " + "x" * (2 << 20) + "\n")
    (cp / "noid.yaml").write_text(CARD.format(id="other"))
    (cp / "extra.yaml").write_text(CARD.format(id="extra") + "shoe_size: 9\n")
    (cp / "listtop.yaml").write_text("- a\n- b\n")
    (cp / "empty.yaml").write_text("")
    (cp / "badyaml.yaml").write_text("version: [1\n")
    (cp / "tabs.yaml").write_text("version: 1\n\tid: tabs\n")
    (cp / "keyenv.yaml").write_text(CARD.format(id="keyenv") + "key_env: 'sk-live abc'\n")
    (cp / "version0.yaml").write_text(CARD.format(id="version0").replace("version: 1", "version: 0"))
    (cp / "nobackend.yaml").write_text(CARD.format(id="nobackend").replace("backend: scripted", "backend: telepathy"))
    (cp / "telesales.yaml").write_text(CARD.format(id="telesales").replace("[dealnodeal]", "[telesales]"))
    (cp / "down.yaml").write_text("version: 1\nid: down\nbackend: openai\nmodel: m\nbase_url: http://127.0.0.1:9/v1\n"
                                  "key_env: none\nparams: {max_attempts: 1, timeout: 5}\ndomains: [dealnodeal]\n")
    (cp / "nantemp.yaml").write_text("version: 1\nid: nantemp\nbackend: openai\nmodel: m\nbase_url: http://127.0.0.1:9/v1\n"
                                     "key_env: none\nparams: {temperature: .nan}\ndomains: [dealnodeal]\n")
    (cp / "unsetkey.yaml").write_text("version: 1\nid: unsetkey\nbackend: openai\nmodel: m\nbase_url: http://127.0.0.1:9/v1\n"
                                      "key_env: IBRL_TEST_UNSET_KEY\ndomains: [dealnodeal]\n")
    (cp / "dir.yaml").mkdir()
    p = cp / "panels"
    (p / "latinp.yaml").write_bytes(PANEL.format(name="latinp").encode() + b"description: \xff\xfe\n")
    (p / "bombp.yaml").write_text(PANEL.format(name="bombp") + "extra:\n" + _bomb())
    (p / "badmember.yaml").write_text(PANEL.format(name="badmember").replace("[scripted:dealnodeal/boulware]",
                                                                             "[boulware]"))
    (p / "ts.yaml").write_text(PANEL.format(name="ts").replace("domain: dealnodeal", "domain: telesales"))
    (p / "badroles.yaml").write_text(PANEL.format(name="badroles") + "roles: [seller]\n")
    (p / "misnamed.yaml").write_text(PANEL.format(name="other"))
    (p / "empty.yaml").write_text("")


def _runs(world: Path, main) -> None:
    argv = ["crossplay", "--policy", FAIR, "--policy", BOULWARE, "--counterpart", CONCEDER, "--counterpart", HARDLINER,
            "--role", "a", "--scenarios", "2", "--concurrency", "1", "--quiet", "--out"]
    code, _, err = main([*argv, str(world / "run")])
    assert code == 0, err
    run = world / "run"
    shutil.copytree(run, world / "run_epdir")
    (world / "run_epdir" / "episodes.jsonl").unlink()
    (world / "run_epdir" / "episodes.jsonl").mkdir()
    shutil.copytree(run, world / "run_badmanifest")
    (world / "run_badmanifest" / "manifest.json").write_text("{")
    shutil.copytree(run, world / "run_badline")
    lines = (run / "episodes.jsonl").read_text().splitlines(keepends=True)
    (world / "run_badline" / "episodes.jsonl").write_text("".join([lines[0], "{not json}\n", *lines[1:]]))
    shutil.copytree(run, world / "run_partial")  # killed after the conceder cells, before results.json
    (world / "run_partial" / "results.json").unlink()
    (world / "run_partial" / "cells.csv").unlink()
    kept = [line for line in lines if json.loads(line)["counterpart"] == CONCEDER]
    (world / "run_partial" / "episodes.jsonl").write_text("".join(kept))
    (world / "run_notmanifest").mkdir()
    (world / "run_notmanifest" / "manifest.json").mkdir()


def _recipes(r: Path) -> None:
    r.mkdir()
    (r / "latin.yaml").write_bytes(b"version: 1\nname: caf\xe9\n")
    (r / "bomb.yaml").write_text("version: 1\nx:\n" + _bomb())
    (r / "list.yaml").write_text("- 1\n")
    (r / "noversion.yaml").write_text("steps: 2\n")
    (r / "v9.yaml").write_text("version: 9\n")
    (r / "badyaml.yaml").write_text("version: 1\nsteps: [2\n")
    (r / "sft.yaml").write_text("version: 1\nmethod: sft\n")
    (r / "unknown.yaml").write_text("version: 1\nmethod: sft\nstep: 3\n")


UNILATERAL = str(Path(__file__).resolve().parents[1] / "training" / "dealnodeal-tiny-unilateral.yaml")


def _trainings(world: Path) -> None:
    """A training folder with its recipe, log and a resume state (lr 1e-4), and one without a state.
    Without torch the state is not written (the cases that read it are skipped: NEEDS_TRAIN_EXTRA)."""
    for name in ("trained", "trained_nostate"):
        folder = world / name
        folder.mkdir()
        (folder / "recipe.yaml").write_text("version: 1\nmethod: unilateral\n# as trained\n")
        (folder / "train_log.jsonl").write_text('{"step": 1}\n')
    if importlib.util.find_spec("torch") is None:
        return
    import torch

    from ibrl_bench.train import resume
    from ibrl_bench.train.recipes import load_recipe
    from ibrl_bench.train.unilateral import UnilateralConfig

    config = load_recipe(UNILATERAL, UnilateralConfig, [f"out={world / 'trained'}"])
    state = resume.state_path(config.out)
    state.parent.mkdir()
    torch.save({"format": resume.FORMAT, "step": 1, "identity": resume.identity(config), "policies": {}}, state)


def _tracks(lb: Path) -> None:
    bomb = lb / "dealnodeal" / "bomb"
    bomb.mkdir(parents=True)
    (bomb / "track.yaml").write_text("version: 1\nx:\n" + _bomb())
    latin = lb / "dealnodeal" / "latin"
    latin.mkdir(parents=True)
    (latin / "track.yaml").write_bytes(b"version: 1\nname: caf\xe9\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world = tmp_path_factory.mktemp("world")
    (world / "afile").write_text("x")
    (world / "bin.txt").write_bytes(bytes(range(256)) * 4)
    (world / "odd.txt").write_text("1 2 3 4 5 6\n")
    (world / "words.txt").write_text("hello world\n")
    (world / "floats.txt").write_text("1 2.5 3 4 5 6\n1 2 3 4 5 6\n")
    (world / "empty.txt").write_text("")
    (world / "ctxdir").mkdir()
    (world / "emptydir").mkdir()
    (world / "notrun").mkdir()
    (world / "notrun" / "keep.txt").write_text("mine")
    _cards(world / "cp")
    _recipes(world / "recipes")
    _tracks(world / "lb")
    _trainings(world)

    _runs(world, _call)
    return world


def _call(argv: list[str]) -> tuple[int | str, str, str]:
    """`ibrl-bench ARGV` in this process: (exit code, stdout, stderr)."""
    result = run_in_process(argv)
    return result.returncode, result.stdout, result.stderr


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its kind and, for files, a hash of its bytes and its mtime."""
    tree = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            tree[rel] = "dir"
        else:
            tree[rel] = f"{hashlib.sha1(path.read_bytes()).hexdigest()} {path.stat().st_mtime_ns}"
    return tree


# ---------------------------------------------------------------- the table

X = ["crossplay", "--quiet", "--scenarios", "2"]
PC = ["--policy", FAIR, "--counterpart", BOULWARE]
XP = [*X, *PC]  # a valid crossplay, to add one bad thing to


def vs(policy: str, *extra: str) -> list[str]:
    return [*X, "--policy", policy, "--counterpart", BOULWARE, *extra]


CASES: list[tuple[str, list[str], str, dict | None]] = []


def case(name: str, argv: list[str], fragment: str, env: dict | None = None) -> None:
    CASES.append((name, argv, fragment, env))


CP = {"IBRL_BENCH_COUNTERPARTS": "cp"}
LB = {"IBRL_BENCH_LEADERBOARDS": "lb"}

# Flags with values out of their range, of the wrong type, or not numbers at all.
for flag, values in {
    "--seeds": ["0", "-1", "1e20", "100000000000000000000", "x", "", "1.5", "nan"],
    "--scenarios": ["0", "-3", "x", "1e3", ""],
    "--concurrency": ["0", "-1", "x", "inf"],
    "--retries": ["-1", "x", "nan"],
    "--move-timeout": ["nan", "NaN", "-nan", "0", "-1", "x", "-inf", ""],
    "--fail-on-error": ["nan", "2", "-0.1", "x", "inf", "1e400"],
    "--max-turns": ["1", "0", "x", "nan", "100000000000000000000"],
    "--split": ["bogus", ""],
    "--domain": ["chess", "DEALNODEAL", ""],
}.items():
    for value in values:
        case(f"crossplay {flag}={value!r}", [*XP, flag, value], flag)
case("crossplay unknown flag", [*XP, "--bogus-flag"], "--bogus-flag")
case("crossplay flag without value", [*XP, "--seeds"], "--seeds")
case("crossplay stray argument", [*XP, "extra"], "extra")
case("crossplay role of another domain", [*XP, "--role", "seller"], "unknown role")
case("crossplay role typo", [*XP, "--role", "A"], "unknown role")
case("crossplay no policy", [*X, "--counterpart", BOULWARE], "no --policy")
case("crossplay counterpart panel of another domain", [*X, "--policy", FAIR, "--counterpart", "panel:ts"],
     "panel for telesales", CP)

# Run folders that cannot be one.
for out, fragment in [("afile", "is a file"), ("afile/sub", "cannot create the run folder"),
                      ("/proc/xyz", "cannot create the run folder"), ("/dev/null/x", "cannot create the run folder"),
                      ("notrun", "not empty"),
                      ("run_epdir", "is not a file"), ("run_badmanifest", "not a valid run manifest"),
                      ("run_notmanifest", "not a valid run manifest")]:
    case(f"crossplay --out {out}", [*XP, "--out", out], fragment)
# A run folder grows by seats, never by scenarios, seeds or turn limit.
for option, value in [("--scenarios", "3"), ("--seeds", "2"), ("--max-turns", "6")]:
    case(f"crossplay --out run {option} {value}", [*XP, "--out", "run", option, value],
         "different configuration")

# Context files.
for path, fragment in [("bin.txt", "not a text context file"), ("missing.txt", "cannot read context file"),
                       ("ctxdir", "--contexts"), ("odd.txt", "odd number"), ("words.txt", "six integers"),
                       ("floats.txt", "six integers"), ("empty.txt", "no contexts found"), ("afile", "six integers")]:
    case(f"crossplay --contexts {path}", [*XP, "--contexts", path], fragment)
case("crossplay --contexts in telesales", [*X, "--domain", "telesales", "--policy", "scripted:telesales/consultative",
                                           "--counterpart", "scripted:telesales/friendly", "--contexts", "odd.txt"],
     "Deal-or-NoDeal option")

# Agent specs.
for spec, fragment in [
    ("boulware", "malformed agent spec"), ("", "malformed agent spec"), ("scripted:", "malformed agent spec"),
    ("scripted:dealnodeal/", "unknown scripted agent"), ("warp:x", "unknown agent kind"),
    ("Scripted:dealnodeal/fair", "malformed agent spec"), ("scripted:dealnodeal/fair extra", "malformed agent spec"),
    ("scripted:dealnodeal/nope", "unknown scripted agent"),
    ("scripted:telesales/consultative", "this run plays dealnodeal"),
    ("scripted:dealnodeal/boulware?beta=nan", "not a finite number"),
    ("scripted:dealnodeal/boulware?beta=inf", "not a finite number"),
    ("scripted:dealnodeal/boulware?beta=-inf", "not a finite number"),
    ("scripted:dealnodeal/boulware?beta=NaN", "not a finite number"),
    ("scripted:dealnodeal/fair?beta=x&&", "malformed parameters"),
    ("scripted:dealnodeal/fair?=1", "malformed parameters"),
    ("python:no_such_module:f", "cannot import"), ("python:plugins", "malformed plugin spec"),
    ("python:plugins:", "malformed plugin spec"), ("python::f", "malformed plugin spec"),
    ("python:plugins:nope", "no callable"), ("python:plugins:FIXED", "no callable"),
    ("python:plugins:NotAnAgent", "async def act"), ("python:hostile:factory_none", "async def act"),
    ("python:hostile:factory_sync_act", "async def act"),
    ("python:hostile:factory_value_error", "ValueError: bad model path"),
    ("python:hostile:factory_runtime_error", "RuntimeError: CUDA not available"),
    ("python:hostile:factory_system_exit", "SystemExit"), ("python:hostile:factory_cancelled", "CancelledError"),
    ("python:hostile:factory_zero_division", "ZeroDivisionError"), ("python:hostile:factory_key_error", "KeyError"),
    ("python:hostile:factory_os_error", "FileNotFoundError"), ("python:hostile:factory_recursion", "RecursionError"),
    ("python:hostile:factory_empty_message", "raised Exception while building"),
    ("python:plugins:Slow?nope=1", "unknown parameter 'nope' for python:plugins:Slow?nope=1; "
                                   "valid parameters: name: str = 'boulware', delay: float = 0.01"),
    ("python:plugins:Slow?name=nope", "unknown scripted agent"),
    ("openai:gpt@ftp://x", "malformed spec"), ("openai:@http://127.0.0.1:9/v1", "malformed"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=IBRL_TEST_UNSET_KEY", "IBRL_TEST_UNSET_KEY, which is not set"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&temperature=-1", "bad parameter temperature"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&temprature=1", "unknown parameter"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&timeout=0", "bad parameter timeout"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&timeout=nan", "not a finite number"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&max_attempts=0", "bad parameter max_attempts"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&top_p=2", "bad parameter top_p"),
    ("openai:gpt@http://127.0.0.1:9/v1?key_env=none&concurrency=x", "bad parameter concurrency"),
    ("litellm:nomodel", "malformed spec"), ("litellm:openai/x@ftp://y", "malformed spec"),
    ("card:nope", "unknown card"), ("card:deepseek-v4-pro?temperature=0", "a card pins its parameters"),
    ("panel:nope", "unknown panel"),
]:
    case(f"spec {spec!r}", vs(spec), fragment)
case("spec as counterpart", [*X, "--policy", FAIR, "--counterpart", "python:hostile:factory_value_error"], "ValueError")
case("panel of another domain", [*X, "--policy", FAIR, "--panel", "telesales-buyers-heldout"], "panel for telesales")
case("unknown panel", [*X, "--policy", FAIR, "--panel", "nope"], "unknown panel")

# Agents that break while playing: the run stops at once, and leaves no folder behind.
for agent, fragment in [("ActSystemExit", "raised SystemExit during a move"),
                        ("ActKeyboardInterrupt", "raised KeyboardInterrupt during a move"),
                        ("ActCancelled", "CancelledError of its own"), ("ActGeneratorExit", "raised GeneratorExit"),
                        ("ActReturnsText", "answered a move with str, not a Reply"),
                        ("ActReturnsNone", "answered a move with NoneType")]:
    spec = f"python:hostile:{agent}"
    case(f"crossplay agent {agent}", vs(spec, "--out", "newrun/deeper"), fragment)
    case(f"crossplay agent {agent}, existing empty --out", vs(spec, "--out", "emptydir", "--concurrency", "3"),
         fragment)
    case(f"play agent {agent}", ["play", "--policy", spec], fragment)
case("crossplay broken key", vs("python:plugins:BadKey", "--out", "newrun"), "rejected the key")
case("crossplay broken agent, with the progress bar", ["crossplay", "--policy", "python:hostile:ActSystemExit",
                                                       "--counterpart", FAIR, "--out", "newrun"], "raised SystemExit")
case("crossplay --out empty string", [*XP, "--out", ""], "--out is empty")
case("crossplay very long spec", vs("scripted:dealnodeal/" + "x" * 5000), "unknown scripted agent")
case("crossplay spec with a newline", vs("scripted:dealnodeal/fair\nrm -rf /"), "malformed agent spec")
case("crossplay spec with markup", vs("scripted:dealnodeal/[bold]x[/bold]"), "[bold]x[/bold]")

# Cards and panels (a folder of hostile ones).
for name, fragment in [("latin", "not UTF-8"), ("bomb", "expands to more than"), ("recursive", "expands to more than"),
                       ("deep", "nests deeper than"), ("big", "at most"), ("noid", "file name and `id` must match"),
                       ("extra", "shoe_size"), ("listtop", "card format"), ("empty", "card format"),
                       ("badyaml", "not valid YAML"), ("tabs", "not valid YAML"), ("keyenv", "key_env"),
                       ("version0", "version"), ("nobackend", "backend")]:
    case(f"counterparts show {name}", ["counterparts", "show", name], fragment, CP)
    case(f"crossplay card:{name}", [*X, "--policy", FAIR, "--counterpart", f"card:{name}"], fragment, CP)
case("counterparts show nope", ["counterparts", "show", "nope"], "no card or panel named 'nope'", CP)
case("crossplay card:nope", [*X, "--policy", FAIR, "--counterpart", "card:nope"], "unknown card", CP)
case("card of another domain", [*X, "--policy", FAIR, "--counterpart", "card:telesales"], "not dealnodeal", CP)
case("card with nan temperature", [*X, "--policy", FAIR, "--counterpart", "card:nantemp"], "temperature", CP)
case("counterparts list of hostile cards", ["counterparts", "list"], "cp/", CP)
case("counterparts check, server down", ["counterparts", "check", "down"], "connection refused", CP)
case("counterparts check, key unset", ["counterparts", "check", "unsetkey"], "IBRL_TEST_UNSET_KEY is not set", CP)
case("counterparts check, unknown", ["counterparts", "check", "nope"], "unknown card", CP)
case("counterparts check, non-UTF-8", ["counterparts", "check", "latin"], "not UTF-8", CP)
case("counterparts check, wrong domain", ["counterparts", "check", "bomb", "--domain", "chess"], "chess")
for name, fragment in [("latinp", "not UTF-8"), ("bombp", "expands to more than"),
                       ("badmember", "malformed agent spec"), ("badroles", "roles"),
                       ("misnamed", "file name and `name` must match"), ("empty", "panel format"),
                       ("nope", "unknown panel")]:
    case(f"--panel {name}", [*X, "--policy", FAIR, "--panel", name], fragment, CP)
case("counterparts show panel bomb", ["counterparts", "show", "bombp"], "expands to more than", CP)

# Run folders given to the commands that read them.
READERS = [["show"], ["rank"], ["passk"], ["report"], ["compare", "_", "fair", "boulware"],
           ["mismatch", "_", "--policy", "fair", "--train-counterpart", "conceder"],
           ["plan", "--delta", "0.1", "--from"]]
for folder, fragment in [("nope", "not a run folder"), ("afile", "afile"), ("emptydir", "not a run folder"),
                         ("run_epdir", "is not a file"), ("run_badmanifest", "not a valid run manifest"),
                         ("run_badline", "not a valid episode record")]:
    for reader in READERS:
        argv = [a if a != "_" else folder for a in reader] + ([folder] if "_" not in reader else [])
        case(f"{reader[0]} {folder}", argv, fragment)
case("rank drops no cell", ["rank", "run_partial"], "rank needs a score in every cell")
case("compare unknown policy", ["compare", "run", "fair", "nope"], "nope")
case("compare policy with counterpart", ["compare", "run", "fair", "conceder"], "not both policies")
case("mismatch unknown counterpart", ["mismatch", "run", "--policy", "fair", "--train-counterpart", "nope"], "nope")
case("passk one seed", ["passk", "run"], "one seed per scenario")
case("rank unknown role", ["rank", "run", "--role", "b"], "role 'b' is not in the run")
case("report into a folder", ["report", "run", "--out", "emptydir"], "emptydir")
for command in (["rank", "run"], ["report", "run"], ["compare", "run", "fair", "boulware"]):
    case(f"{command[0]} unknown metric", [*command, "--metric", "nope"], "nope")
case("show empty string", ["show", ""], "not a run folder")
case("plan without variance", ["plan", "--delta", "0.1"], "plan needs the variance")
case("plan nan delta", ["plan", "--delta", "nan", "--rate", "0.5"], "--delta")
case("plan nan sd", ["plan", "--delta", "0.1", "--sd-between", "nan", "--sd-within", "1"], "--sd-between")
case("compare nan confidence", ["compare", "run", "fair", "boulware", "--confidence", "nan"], "--confidence")

# Training recipes (refused before torch is imported).
for recipe, fragment in [("recipes/latin.yaml", "not UTF-8"), ("recipes/bomb.yaml", "expands to more than"),
                         ("recipes/list.yaml", "YAML mapping"), ("recipes/noversion.yaml", "no version"),
                         ("recipes/v9.yaml", "version 9"), ("recipes/badyaml.yaml", "not valid YAML"),
                         ("recipes/nope.yaml", "not found"), ("recipes", "recipes"),
                         ("recipes/unknown.yaml", "recipes/unknown.yaml: domain is required")]:
    case(f"train {recipe}", ["train", "sft", "--recipe", recipe], fragment)
case("train recipe of another method", ["train", "ibrl", "--recipe", "recipes/sft.yaml"], "method 'sft'")
case("train bad override", ["train", "sft", "--recipe", "recipes/sft.yaml", "steps"], "KEY=VALUE")
case("train override bomb", ["train", "sft", "--recipe", "recipes/sft.yaml", "steps=[*a]"], "override")
T = ["train", "unilateral", "--recipe", UNILATERAL]
case("train unilateral, lr of another training", [*T, "out=trained", "lr=2e-4"],
     "another recipe (lr: 0.0001 there, 0.0002 here)")
case("train unilateral, role of another domain", [*T, "out=newtraining/x", "role=seller"], "not a role of dealnodeal")
case("train unilateral, bad role over an earlier training", [*T, "out=trained_nostate", "role=c"], "not a role")
case("train unilateral, nan lr", [*T, "out=newtraining", "lr=.nan"], "lr")
# Refused only once the trainer's stack is loaded (or reading a state written with torch): without
# the [train] extra these are skipped.
NEEDS_TRAIN_EXTRA = {"train unilateral, lr of another training", "train unilateral, role of another domain",
                     "train unilateral, bad role over an earlier training"}
case("train unknown method", ["train", "ppo", "--recipe", "recipes/sft.yaml"], "ppo")

# Leaderboards.
case("submit unknown track", ["submit", "--track", "nope/nope", "--policy", FAIR, "--name", "n"], "unknown track")
case("submit bomb track", ["submit", "--track", "lb/dealnodeal/bomb/track.yaml", "--policy", FAIR, "--name", "n"],
     "expands to more than")
case("submit non-UTF-8 track", ["submit", "--track", "lb/dealnodeal/latin/track.yaml", "--policy", FAIR, "--name", "n"],
     "not UTF-8")
case("leaderboard show bomb", ["leaderboard", "show", "--track", "dealnodeal/bomb"], "expands to more than", LB)
case("leaderboard verify nothing", ["leaderboard", "verify", "nope"], "nope")
case("leaderboard verify a file", ["leaderboard", "verify", "afile"], "afile")

# play.
for argv, fragment in [(["--scenario", "99999"], "out of range"), (["--scenario", "nope"], "no scenario 'nope'"),
                       (["--role", "seller"], "unknown role"), (["--seed", "x"], "--seed"),
                       (["--move-timeout", "nan"], "--move-timeout"), (["--move-timeout", "0"], "--move-timeout"),
                       (["--split", "x"], "--split"), (["--max-turns", "100000000000000000000"], "--max-turns"),
                       (["--policy", "python:plugins:Broken"], "simulated: endpoint down"),
                       (["--policy", "panel:dealnodeal-scripted-heldout"], "names several agents"),
                       (["--domain", "telesales", "--policy", FAIR], "this run plays telesales"),
                       (["--policy", "scripted:dealnodeal/boulware?beta=nan"], "not a finite number"),
                       (["--policy", "python:hostile:factory_runtime_error"], "RuntimeError"),
                       (["--policy", "python:plugins:Hang", "--move-timeout", "0.3"], "a move took longer than 0.3 s")]:
    case(f"play {' '.join(argv)}", ["play", *argv], fragment)


def test_the_table_holds_enough_cases():
    assert len(CASES) >= 150, len(CASES)
    assert len({name for name, *_ in CASES}) == len(CASES)


@pytest.mark.parametrize("name, argv, fragment, env", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_gets_one_line_and_changes_nothing(world, monkeypatch, name, argv, fragment, env):
    if name in NEEDS_TRAIN_EXTRA and importlib.util.find_spec("torch") is None:
        pytest.skip("refused after the trainer's imports, which need the [train] extra (torch)")
    monkeypatch.chdir(world)
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.delenv("IBRL_TEST_UNSET_KEY", raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, str(world / value))
    before = snapshot(world)
    code, out, err = _call(argv)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert code not in (0, None), (out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), out + err
    assert fragment in lines[0], lines[0]
    assert snapshot(world) == before


# ---------------------------------------------------------------- as a user runs them

def ibrl(*args: str, cwd: Path, env: dict | None = None, timeout: float = 60) -> CliResult:
    return run_process(*args, cwd=cwd, env=env, timeout=timeout)


def one_line(proc: CliResult) -> str:
    assert proc.returncode not in (0, None)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("args, fragment", [
    (vs("python:hostile:ActSystemExit", "--out", "r"), "raised SystemExit during a move"),
    ([*XP, "--contexts", "bin.txt"], "not a text context file"),
    (["counterparts", "list"], "not UTF-8"),
])
def test_as_a_process_one_line_no_traceback_nothing_written(tmp_path, args, fragment):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00 binary")
    cp = tmp_path / "cp"
    cp.mkdir()
    (cp / "latin.yaml").write_bytes(CARD.format(id="latin").encode() + b"description: caf\xe9\n")
    before = snapshot(tmp_path)
    assert fragment in one_line(ibrl(*args, cwd=tmp_path, env={"IBRL_BENCH_COUNTERPARTS": str(cp)}))
    assert snapshot(tmp_path) == before


def test_an_agent_blocking_the_event_loop_is_stopped_within_the_move_timeout_and_named(tmp_path):
    command = vs("python:hostile:Blocking", "--move-timeout", "1", "--out", "r")
    proc = ibrl(*command, cwd=tmp_path, timeout=60)  # the agent sleeps for an hour
    line = one_line(proc)
    assert "python:hostile:Blocking blocked the event loop" in line and "move timeout of 1 s" in line
    blocked = float(re.search(r"blocked the event loop for ([0-9.]+) s", line).group(1))
    assert 3.0 <= blocked < 4.0, line  # the move timeout (1 s) plus the slack (2 s), checked every 0.1 s
    assert not (tmp_path / "r").exists()  # stopped before its first episode finished: nothing written


def test_the_watchdog_names_the_agent_holding_the_loop_within_the_timeout_and_slack(monkeypatch):
    """The guard `play` and `crossplay` share, in process: the agent blocks for 1.5 s, the move
    timeout is 0.2 s and the slack 0.3 s, so the watchdog must speak after 0.5 s, well before 1.5 s.
    (It would end the process; here it records what it would say.)"""
    import asyncio

    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.domains import get_domain
    from ibrl_bench.runner.episode import _act
    from ibrl_bench.runner.watchdog import LoopWatchdog

    monkeypatch.syspath_prepend(str(TESTS))
    seat = build_agent("python:hostile:Blocking?seconds=1.5", "dealnodeal")
    game = get_domain("dealnodeal")
    obs = game.observe(game.start(game.scenario_set("test", 1).scenarios[0], 0), "a")
    said: list[tuple[float, str]] = []

    async def move():
        started = time.monotonic()
        async with LoopWatchdog(0.2, on_block=lambda m: said.append((time.monotonic() - started, m)), slack=0.3):
            await _act(seat.agent, obs, seat.spec)  # as the dialogue loop calls it, naming the seat

    asyncio.run(move())
    (when, message), = said
    assert 0.5 <= when < 1.0, when
    assert message.startswith("python:hostile:Blocking?seconds=1.5 blocked the event loop for")


def test_a_yaml_bomb_card_is_refused_at_once(tmp_path):
    cp = tmp_path / "cp"
    cp.mkdir()
    (cp / "bomb.yaml").write_text(CARD.format(id="bomb") + "params:\n" + _bomb(levels=12))  # 10**12 values expanded
    started = time.monotonic()
    proc = ibrl("counterparts", "show", "bomb", cwd=tmp_path, env={"IBRL_BENCH_COUNTERPARTS": str(cp)}, timeout=30)
    assert "expands to more than 100,000 values" in one_line(proc)
    assert time.monotonic() - started < 15

    from ibrl_bench.agents.cards import load_card
    from ibrl_bench.errors import UserError

    os.environ["IBRL_BENCH_COUNTERPARTS"] = str(cp)
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match="expands to more than"):
            load_card("bomb")
        assert time.monotonic() - started < 1.0
    finally:
        del os.environ["IBRL_BENCH_COUNTERPARTS"]


# ---------------------------------------------------------------- keys, retries, stops, stale results

SENTINEL = "sk-SENTINEL-echo-0123456789abcdef"


def test_a_key_echoed_by_an_endpoint_never_reaches_the_terminal(tmp_path, monkeypatch):
    pytest.importorskip("fastapi")
    from ibrl_bench.testing.fake_openai import Faults, make_app, serve

    monkeypatch.setenv("IBRL_TEST_ECHO_KEY", SENTINEL)
    monkeypatch.chdir(tmp_path)
    cp = tmp_path / "cp"
    cp.mkdir()
    monkeypatch.setenv("IBRL_BENCH_COUNTERPARTS", str(cp))
    with serve(make_app(Faults(echo_key=True))) as url:
        (cp / "echo.yaml").write_text(f"version: 1\nid: echo\nbackend: openai\nmodel: {BOULWARE}\nbase_url: {url}\n"
                                      "key_env: IBRL_TEST_ECHO_KEY\ndomains: [dealnodeal]\n")
        policy = f"openai:{BOULWARE}@{url}?key_env=IBRL_TEST_ECHO_KEY&observation=true"
        played = _call(["play", "--policy", policy, "--scenario", "1"])
        checked = _call(["counterparts", "check", "echo"])
    for code, out, err in (played, checked):
        assert code == 0, out + err
        assert SENTINEL not in out + err
        assert "(key ***)" in out, out  # the echo was printed, masked like the run log masks it


def test_remote_retries_are_recorded_per_episode_and_summed_per_cell(tmp_path):
    pytest.importorskip("fastapi")
    from ibrl_bench.testing.fake_openai import Faults, make_app, serve

    app = make_app(Faults(p_500=0.3, p_429=0.1, retry_after_s=0.0, seed=3))
    with serve(app) as url:
        policy = f"openai:{BOULWARE}@{url}?key_env=none&observation=true&backoff=0.001&max_backoff=0.01&max_attempts=8"
        code, out, err = _call([*X, "--policy", policy, "--counterpart", CONCEDER, "--out", str(tmp_path / "r")])
    assert code == 0, out + err
    records = [json.loads(line) for line in (tmp_path / "r" / "episodes.jsonl").read_text().splitlines()]
    assert all(r["outcome"]["status"] != "error" for r in records)
    per_episode = sum(n for r in records for n in r["retries"].values())
    assert per_episode == app.state.faults_served > 0  # every fault served was retried, and counted once
    assert {kind for r in records for kind in r["retries"]} <= {"500 InternalServerError", "429 RateLimitError"}
    cells = json.loads((tmp_path / "r" / "results.json").read_text())["cells"]
    assert sum(n for c in cells for n in c["retries"].values()) == per_episode
    assert "remote retries absorbed" in out


def test_a_stopped_run_cancels_what_is_in_flight_and_counts_what_the_folder_holds(tmp_path, monkeypatch):
    from ibrl_bench.domains import get_domain

    monkeypatch.syspath_prepend(str(TESTS))
    first = get_domain("dealnodeal").scenario_set("test", 1).scenarios[0].id
    agent = f"python:hostile:FailButFirstHangs?hang_on={first}"
    started = time.monotonic()
    code, out, err = _call([*X, "--scenarios", "30", "--retries", "0", "--concurrency", "4", "--policy", FAIR,
                                 "--counterpart", agent, "--role", "a", "--out", str(tmp_path / "r")])
    assert time.monotonic() - started < 5  # the episode hanging in flight (for an hour) was cancelled
    assert code == 2
    stop = re.search(r"stopped: (\d+) of the (\d+) episodes this command recorded failed", err)
    assert stop, err
    records = (tmp_path / "r" / "episodes.jsonl").read_text().splitlines()
    assert int(stop.group(2)) == len(records) == 10
    assert int(stop.group(1)) == sum(json.loads(r)["outcome"]["status"] == "error" for r in records)


def test_show_and_the_analysis_commands_read_the_episodes_not_a_stale_results_json(scripted_run_copy):
    # fair and boulware against conceder, role a, 3 scenarios, one episode at a time (conftest.py)
    out_dir = scripted_run_copy
    # As if killed at four episodes of a resumed run whose first part wrote a results.json of six.
    log = out_dir / "episodes.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:4]))
    code, out, err = _call(["show", str(out_dir)])
    assert code == 0, err
    assert "unfinished: 4 of 6 planned episodes are recorded" in out
    results = json.loads((out_dir / "results.json").read_text())
    assert sum(c["n_episodes"] for c in results["cells"]) == 4 and not results["complete"]
    code, out, err = _call(["compare", str(out_dir), "fair", "boulware", "--json"])
    assert code == 0 and "is unfinished: 4 of 6 planned episodes are scored" in err
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))  # boulware's cell: none yet
    code, out, err = _call(["rank", str(out_dir)])
    assert code == 2 and "rank needs a score in every cell" in err and "boulware vs" in err
