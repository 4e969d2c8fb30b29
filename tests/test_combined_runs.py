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
    assert code == 2 and "do not play the same games (seeds: [0] there, [0, 1] here)" in err
    assert len(err.splitlines()) == 1
    fewer = play(tmp_path / "fewer", [S + "tit_for_tat"], scenarios=5)
    code, _, err = cli("compare", runs["one"], fewer, "boulware", "tit_for_tat", capsys=capsys)
    assert code == 2 and "(n_scenarios: 6 there, 5 here)" in err
    copy = shutil.copytree(runs["one"], tmp_path / "copy")
    code, _, err = cli("compare", runs["one"], copy, "boulware", "fair", capsys=capsys)
    assert code == 2 and "both hold the episode scripted:dealnodeal/boulware vs" in err and len(err.splitlines()) == 1
    # The same folder named twice is one folder.
    code, _, err = cli("compare", runs["one"], f"{runs['one']}/", "boulware", "fair", "--json", capsys=capsys)
    assert code == 0, err


# ------------------------------------------------------------------------- --format csv | latex

def test_tables_export_as_csv_and_latex_with_the_numbers_and_notes_shown(runs, capsys):
    import io

    import pandas as pd

    code, out, err = cli("compare", runs["whole"], "boulware", "tit_for_tat", "--json", capsys=capsys)
    overall = json.loads(out)["overall"]["difference"]
    code, out, err = cli("compare", runs["whole"], "boulware", "tit_for_tat", "--format", "csv", capsys=capsys)
    assert code == 0, err
    assert out.startswith("# boulware - tit_for_tat on success_at_1")
    table = pd.read_csv(io.StringIO(out), comment="#")
    assert len(table) == 1 + 3 * 2  # all cells, then one row per counterpart and role
    row = table.iloc[0]
    assert row["scope"] == "all cells"
    assert row["boulware - tit_for_tat"] == f"{overall['estimate']:.3f} [{overall['low']:.3f}, {overall['high']:.3f}]"
    assert "# 95% intervals; methods:" in out  # the note travels with the table

    code, out, err = cli("rank", runs["whole"], "--format", "csv", capsys=capsys)
    blocks = out.strip().split("\n\n")
    assert code == 0 and len(blocks) == 3 and blocks[1].startswith("# Nash averaging")
    assert set(pd.read_csv(io.StringIO(blocks[0]), comment="#")["policy"]) == {"boulware", "fair", "tit_for_tat"}

    code, out, err = cli("show", runs["whole"], "--format", "latex", capsys=capsys)
    assert code == 0, err
    assert out.count(r"\begin{tabular}") == 1 and out.count(r"\midrule") == 1
    body = out.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == 3 * 3 * 2 and any(line.startswith("boulware & conceder & a & 6 &") for line in body)
    caption = out.split(r"\caption")[1].splitlines()[0]
    assert r"95\% intervals" in caption and "95% " not in caption  # % starts a LaTeX comment: escaped
    code, out, err = cli("mismatch", runs["whole"], "--method", "boulware", "conceder", "--reference", "fair",
                         "--format", "latex", capsys=capsys)
    assert code == 0 and r"difference-in-differences" in out and r"\_" in out and "success_at_1" not in out
    code, _, err = cli("rank", runs["whole"], "--format", "csv", "--json", capsys=capsys)
    assert code == 2 and "give one of them" in err
