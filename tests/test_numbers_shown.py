"""Scores are shown with the decimals their scale needs: TeleSales rewards (0-1) with two, Deal-or-NoDeal
points (0-10) with one, whole points with none; in the terminal, the exported tables and the HTML report."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from ibrl_bench.cli import main
from ibrl_bench.report.numbers import decimals
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig


@pytest.mark.parametrize("values, whole, expected", [
    ([0.5, 0.53, 0.61], False, 2),  # 0.50 and 0.53, not 0.5 and 0.5
    ([1.0, 0.0], False, 2),  # a 0-1 scale at its ends still has two
    ([7.4, 10.0, 3.2], False, 1),
    ([0.04, 0.012], False, 3),
    ([54.0, 120.0], False, 0),
    ([7.0, 10.0, 0.0], True, 0),  # whole points
    ([0.81, 0.45], True, 2),
    ([], False, 2),
])
def test_decimals_follow_the_scale(values, whole, expected):
    assert decimals(values, whole=whole) == expected


@pytest.fixture(scope="module")
def telesales_run(tmp_path_factory) -> Path:
    config = CrossplayConfig(domain="telesales", policies=["scripted:telesales/consultative"],
                             counterparts=["scripted:telesales/hurried", "scripted:telesales/skeptical"],
                             roles=["seller"], scenarios=6)
    folder = tmp_path_factory.mktemp("ts") / "run"
    asyncio.run(Crossplay(config, folder).run())
    return folder


def cli(*args, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    out = capsys.readouterr()
    assert exit_info.value.code == 0, out.err
    return out.out


def test_telesales_scores_have_two_decimals_everywhere(telesales_run, tmp_path, capsys):
    score = re.compile(r"^-?\d\.\d\d [\[(]?")  # 0.66 [0.31-1.02]
    table = pd.read_csv(io.StringIO(cli("show", telesales_run, "--format", "csv", capsys=capsys)), comment="#")
    assert len(table) == 2
    for _, row in table.iterrows():
        assert score.match(row["score"]) and score.match(row["cpt score"]), row
    listing = cli("episodes", telesales_run, "--counterpart", "hurried", capsys=capsys)
    rewards = re.findall(r"(?:yes|no)\s+(\S+)\s+(\S+)\s+\d+\s*$", listing, flags=re.M)
    assert len(rewards) == 6 and all(re.fullmatch(r"\d\.\d\d", x) for pair in rewards for x in pair), listing
    out = tmp_path / "report.html"
    cli("report", telesales_run, "--out", out, capsys=capsys)
    page = out.read_text()
    data = json.loads(page.split('id="episodes-data">', 1)[1].split("</script>", 1)[0])
    assert data["digits"] == 2
    assert re.search(r'>0\.\d\d<div class="ci">\[-?\d\.\d\d, ', page)  # the cell table's scores
    assert "x.toFixed(data.digits)" in page  # the transcript browser writes every score with them


def test_whole_points_stay_whole_and_points_keep_one_decimal(tmp_path, capsys):
    config = CrossplayConfig(policies=["scripted:dealnodeal/boulware"], counterparts=["scripted:dealnodeal/fair"],
                             roles=["a"], scenarios=4)
    folder = tmp_path / "run"
    asyncio.run(Crossplay(config, folder).run())
    table = pd.read_csv(io.StringIO(cli("show", folder, "--format", "csv", capsys=capsys)), comment="#")
    assert re.fullmatch(r"\d+\.\d \[.+\]", table.loc[0, "score"]), table.loc[0, "score"]
    listing = cli("episodes", folder, capsys=capsys)
    assert re.search(r"(yes|no)\s+\d+\s+\d+\s+\d+\s*$", listing, flags=re.M), listing


def test_a_value_that_rounds_to_zero_has_no_sign():
    from ibrl_bench.report.numbers import format_interval
    from ibrl_bench.stats.intervals import Interval

    iv = Interval(estimate=0.06, low=-0.001, high=0.11, method="t", confidence=0.95, n=20, n_clusters=20)
    assert format_interval(iv, digits=2) == "0.06 [0.00-0.11]"
    assert format_interval(Interval(estimate=-0.001, low=-0.02, high=0.02, method="t", confidence=0.95, n=20,
                                    n_clusters=20), signed=True) == "0.00 [-0.02, +0.02]"
