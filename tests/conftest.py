"""Fixtures shared by the test modules: what is costly to make is made once per session and copied
where a test changes it.

- `ibrl` runs the command line in this process (`cli.main(argv)`, what the `ibrl-bench` script
  calls), so an error path costs milliseconds rather than seconds of imports; `ibrl_process` runs it
  as a real process, for what only a process shows (exit status as the shell sees it, no traceback,
  signals).
- `tiny_models(**shape)` builds a tiny transformers checkpoint once per shape; `tiny_model` and
  `tiny_model_1layer` are the two shapes most modules use. Tests must not write into them.
- `scripted_run` is a finished scripted cross-play run; `scripted_run_copy` a copy a test may edit.
- `pristine_board` holds one submitted bundle of a small offline track; `board_root` is a copy of
  its track and card (no submissions) with the environment pointed at it, `bundle` a copy of the
  bundle under it: an attack on one test's copy never reaches another, and no test reruns a suite.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from cli_helpers import CliResult, run_in_process, run_process
from leaderboard_helpers import CARD, point_env, submit, write_track

TESTS = Path(__file__).parent


@pytest.fixture(scope="session")
def _gguf_conversions() -> Path:
    """The machine's GGUF conversions (a minute of CPU each the first time), shared by every test."""
    from ibrl_bench.cache_home import cache_home

    folder = cache_home() / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _own_response_cache(tmp_path_factory, monkeypatch, _gguf_conversions):
    """Each test gets an empty cache folder (ibrl_bench/cache_home.py): a reply cached by one test
    never stands in for a call another test counts, nor does the user's. Its gguf/ is the machine's."""
    home = tmp_path_factory.mktemp("xdg-cache")
    (home / "ibrl-bench").mkdir()
    (home / "ibrl-bench" / "gguf").symlink_to(_gguf_conversions, target_is_directory=True)
    monkeypatch.delenv("IBRL_BENCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))


@pytest.fixture
def ibrl(monkeypatch):
    """`ibrl(*argv, cwd=None, env=None) -> CliResult`, in this process. The tests' folder is on the
    path (for `python:plugins:...` specs); `env` entries are set for the call only."""

    def call(*argv: str, cwd: Path | None = None, env: dict | None = None) -> CliResult:
        with monkeypatch.context() as mp:
            mp.syspath_prepend(str(TESTS))
            mp.setenv("COLUMNS", "200")
            if cwd is not None:
                mp.chdir(cwd)
            for key, value in (env or {}).items():
                mp.setenv(key, value)
            return run_in_process(list(argv))

    return call


@pytest.fixture
def ibrl_process():
    """`ibrl_process(*argv, cwd=None, env=None, timeout=120) -> CliResult`, as a separate process."""
    return run_process


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """`tiny_models(**shape) -> folder`: a tiny model of that shape (see models/tiny.py), built once
    per session and shape. Skips the test where torch is not installed."""
    if importlib.util.find_spec("torch") is None:  # not imported here: ibrl_bench.models goes first
        pytest.skip("the tiny model needs torch (the [hf] extra is not installed)")
    from ibrl_bench.models.tiny import build_tiny_model

    built: dict[tuple, Path] = {}

    def get(**shape) -> Path:
        key = tuple(sorted(shape.items()))
        if key not in built:
            built[key] = build_tiny_model(tmp_path_factory.mktemp("tiny"), **shape)
        return built[key]

    return get


@pytest.fixture(scope="session")
def tiny_model(tiny_models) -> Path:
    """The default tiny model (seed 0), as `hf:FOLDER` agents play it."""
    return tiny_models(seed=0)


@pytest.fixture(scope="session")
def tiny_model_1layer(tiny_models) -> Path:
    """A one-layer tiny model (seed 0): the trainers' tests, where a step must stay about a second."""
    return tiny_models(seed=0, num_hidden_layers=1)


SCRIPTED_RUN = ["crossplay", "--quiet", "--policy", "scripted:dealnodeal/fair", "--policy",
                "scripted:dealnodeal/boulware",
                "--counterpart", "scripted:dealnodeal/conceder", "--role", "a", "--scenarios", "3",
                "--concurrency", "1"]


@pytest.fixture(scope="session")
def scripted_run(tmp_path_factory) -> Path:
    """A finished run: fair and boulware against conceder, role a, 3 test scenarios, one seed, played
    one episode at a time (so the log holds fair's cell, then boulware's). Read only: copy to edit."""
    folder = tmp_path_factory.mktemp("scripted") / "run"
    done = run_in_process([*SCRIPTED_RUN, "--out", str(folder)])
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture
def scripted_run_copy(scripted_run, tmp_path) -> Path:
    return Path(shutil.copytree(scripted_run, tmp_path / "run"))


@pytest.fixture(scope="session")
def pristine_board(tmp_path_factory) -> Path:
    """The tiny track (leaderboards/), its card (counterparts/) and one bundle submitted to it."""
    root = tmp_path_factory.mktemp("pristine")
    (root / "counterparts").mkdir()
    (root / "counterparts" / "tough.yaml").write_text(yaml.safe_dump(CARD))
    with pytest.MonkeyPatch.context() as mp:
        point_env(root, mp.setenv)
        write_track(root / "leaderboards")
        submit(root)
    return root


@pytest.fixture
def board_root(tmp_path, monkeypatch, pristine_board) -> Path:
    """A leaderboards root with the tiny track and no submission, and a counterparts folder with
    its card; the environment points at both."""
    for name in ("counterparts", "leaderboards"):
        shutil.copytree(pristine_board / name, tmp_path / name)
    shutil.rmtree(tmp_path / "leaderboards" / "dealnodeal" / "tiny" / "submissions")
    point_env(tmp_path, monkeypatch.setenv)
    return tmp_path


@pytest.fixture
def bundle(board_root, pristine_board) -> Path:
    """A copy of the pristine bundle, under the copied track's submissions/."""
    (src,) = (pristine_board / "leaderboards" / "dealnodeal" / "tiny" / "submissions").iterdir()
    dst = board_root / "leaderboards" / "dealnodeal" / "tiny" / "submissions" / src.name
    shutil.copytree(src, dst)
    return dst
