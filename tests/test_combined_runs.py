"""Several run folders of the same games read as one run: compare, mismatch, rank and report."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from ibrl_bench.cli import main
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

S = "scripted:dealnodeal/"
COUNTERPARTS = [S + "conceder", S + "hardliner", S + "random"]


def play(folder: Path, policies: list[str], **config) -> Path:
    settings = {"counterparts": COUNTERPARTS, "scenarios": 6, "split": "dev", **config}
    asyncio.run(Crossplay(CrossplayConfig(policies=policies, **settings), folder).run())
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The same matrix played twice: in one folder, and split by policy across two folders."""
    root = tmp_path_factory.mktemp("combined")
    return {"whole": play(root / "whole", [S + "boulware", S + "fair", S + "tit_for_tat"]),
            "one": play(root / "one", [S + "boulware", S + "fair"]),
            "two": play(root / "two", [S + "tit_for_tat"])}


def cli(*args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


@pytest.mark.parametrize("command", [
    ["compare", "{runs}", "boulware", "tit_for_tat"],
    ["mismatch", "{runs}", "--method", "boulware", "conceder", "--method", "tit_for_tat", "hardliner",
     "--reference", "fair"],
    ["rank", "{runs}"],
])
def test_two_folders_give_the_numbers_of_one_run_of_their_union(command, runs, capsys):
    def result(*folders):
        args = [a for part in command for a in (folders if part == "{runs}" else [part])]
        code, out, err = cli(*args, "--json", capsys=capsys)
        assert code == 0, err
        return json.loads(out)

    assert result(runs["one"], runs["two"]) == result(runs["whole"])


def test_a_report_of_two_folders_shows_the_episodes_of_both(runs, tmp_path, capsys):
    code, _, err = cli("report", runs["one"], runs["two"], capsys=capsys)
    assert code == 2 and "needs --out" in err
    out = tmp_path / "both" / "report.html"
    code, _, err = cli("report", runs["one"], runs["two"], "--out", out, capsys=capsys)
    assert code == 0, err
    page = out.read_text()
    data = json.loads(page.split('<script type="application/json" id="episodes-data">', 1)[1].split("</script>", 1)[0])
    assert len(data["episodes"]) == 3 * 3 * 2 * 6  # every episode of both folders
    assert f"{runs['one']} + {runs['two']}" in page and (out.parent / "heatmap.png").is_file()


def test_folders_of_other_games_or_with_the_same_episode_are_refused(runs, tmp_path, capsys):
    other = play(tmp_path / "seeds", [S + "tit_for_tat"], seeds=2)
    code, _, err = cli("rank", runs["one"], other, capsys=capsys)
    assert code == 2 and "do not play the same games (seeds: [0] there, [0, 1] here)" in err and len(err.splitlines()) == 1
    fewer = play(tmp_path / "fewer", [S + "tit_for_tat"], scenarios=5)
    code, _, err = cli("compare", runs["one"], fewer, "boulware", "tit_for_tat", capsys=capsys)
    assert code == 2 and "(n_scenarios: 6 there, 5 here)" in err
    copy = shutil.copytree(runs["one"], tmp_path / "copy")
    code, _, err = cli("compare", runs["one"], copy, "boulware", "fair", capsys=capsys)
    assert code == 2 and "both hold the episode scripted:dealnodeal/boulware vs" in err and len(err.splitlines()) == 1
    # The same folder named twice is one folder.
    code, _, err = cli("compare", runs["one"], f"{runs['one']}/", "boulware", "fair", "--json", capsys=capsys)
    assert code == 0, err
