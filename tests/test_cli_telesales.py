"""TeleSales from the command line: the offline matrix, one sale turn by turn, panels with roles."""

from __future__ import annotations

import json

import pytest

from cli_helpers import assert_one_line_error
from ibrl_bench.agents.panels import load_panel
from ibrl_bench.errors import UserError

SELLERS = ["consultative", "discount_led", "pushy_upseller", "by_the_book"]
BUYERS = ["hurried", "skeptical", "friendly", "analytical"]


def test_crossplay_telesales_defaults_to_scripted_sellers_against_the_buyer_panel(ibrl, tmp_path):
    out = tmp_path / "run"
    proc = ibrl("crossplay", "--domain", "telesales", "--scenarios", "6", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "telesales-buyers-heldout" in proc.stderr
    results = json.loads((out / "results.json").read_text())
    cells = {(c["policy"], c["counterpart"], c["policy_role"]) for c in results["cells"]}
    assert cells == {(f"scripted:telesales/{s}", f"scripted:telesales/{b}", "seller") for s in SELLERS for b in BUYERS}
    assert results["complete"] and results["domain"] == "telesales"
    for cell in results["cells"]:
        m = cell["metrics"]
        assert m["success_at_1"]["method"] == "Clopper-Pearson (one episode per scenario)"
        assert m["success_at_1"]["low"] is not None
        for name in ("fell_through", "buyer_left", "price_share_of_list", "seller_margin", "buyer_surplus",
                     "invalid_offers", "turns", "success_easy", "success_medium", "success_hard"):
            assert name in m, name
    assert "Success@1" in proc.stdout and "Clopper-Pearson" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scenario_set"]["version"] == "ts-scenarios-v1" and manifest["identity"]["roles"] == ["seller"]


@pytest.mark.slow
def test_the_full_default_telesales_matrix(ibrl, tmp_path):
    proc = ibrl("crossplay", "--domain", "telesales", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    results = json.loads((run / "results.json").read_text())
    assert len(results["cells"]) == 16 and results["complete"]
    rates = [c["metrics"]["success_at_1"]["estimate"] for c in results["cells"]]
    assert min(rates) < 0.3 and max(rates) > 0.8


def test_a_buyer_policy_against_the_seller_panel_plays_the_buyer(ibrl, tmp_path):
    out = tmp_path / "run"
    proc = ibrl("crossplay", "--domain", "telesales", "--policy", "scripted:telesales/analytical",
                "--panel", "telesales-sellers-heldout", "--scenarios", "3", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert {c["policy_role"] for c in results["cells"]} == {"buyer"} and len(results["cells"]) == 4


def test_play_as_the_buyer_defaults_to_a_scripted_buyer(ibrl):
    proc = ibrl("play", "--domain", "telesales", "--role", "buyer", "--scenario", "2")
    assert proc.returncode == 0, proc.stderr
    assert "buyer (scripted:telesales/friendly):" in proc.stdout


def test_play_telesales_shows_a_readable_sale(ibrl):
    proc = ibrl("play", "--domain", "telesales", "--scenario", "1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "buyer persona" in out and "seller brief" in out and "reservation" in out
    assert "seller (scripted:telesales/consultative):" in out and "buyer (scripted:telesales/friendly):" in out
    assert "<offer>vehicle=" in out and "<accept>" in out and "sold " in out and "outcome" in out


def test_a_scripted_agent_in_the_wrong_role_stops_the_run_with_one_clear_error(ibrl, tmp_path):
    # Without --role the policy plays both roles; a seller cannot play the buyer, nor a buyer the seller.
    proc = ibrl("crossplay", "--domain", "telesales", "--policy", "scripted:telesales/consultative",
                "--counterpart", "scripted:telesales/friendly", "--scenarios", "2", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: scripted:telesales/") and "cannot play the" in last and "--role" in last
    fine = ibrl("crossplay", "--domain", "telesales", "--policy", "scripted:telesales/consultative",
                "--counterpart", "scripted:telesales/friendly", "--role", "seller", "--scenarios", "2",
                "--out", str(tmp_path / "ok"), "--quiet")
    assert fine.returncode == 0, fine.stderr


@pytest.mark.parametrize("args, fragments", [
    (["crossplay", "--domain", "telesales", "--policy", "scripted:telesales/consultative",
      "--panel", "dealnodeal-scripted-heldout"], ["dealnodeal-scripted-heldout is a panel for dealnodeal"]),
    (["crossplay", "--domain", "telesales", "--policy", "scripted:telesales/consultative", "--counterpart",
      "scripted:telesales/friendly", "--contexts", "ctx.txt"], ["--contexts is a Deal-or-NoDeal option"]),
    (["play", "--domain", "telesales", "--role", "buyer", "--policy", "scripted:telesales/consultative"],
     ["consultative is a seller; it cannot play the buyer role"]),
])
def test_bad_telesales_input_gets_one_clear_line(ibrl, args, fragments, tmp_path):
    assert_one_line_error(ibrl(*args, cwd=tmp_path), *fragments)


def test_panels_name_their_roles_and_old_panels_still_load(tmp_path, monkeypatch):
    assert load_panel("telesales-buyers-heldout").roles == ["buyer"]
    assert load_panel("telesales-sellers-heldout").roles == ["seller"]
    assert load_panel("dealnodeal-scripted-heldout").roles is None  # written before `roles` existed
    (tmp_path / "panels").mkdir()
    (tmp_path / "panels" / "odd.yaml").write_text(
        "version: 1\nname: odd\ndomain: telesales\nroles: [driver]\nmembers: [scripted:telesales/friendly]\n")
    monkeypatch.setenv("IBRL_BENCH_COUNTERPARTS", str(tmp_path))
    with pytest.raises(UserError, match="roles"):
        load_panel("odd")


def test_crossplay_telesales_buyer_demo_seats_scripted_buyers_against_the_seller_panel(ibrl, tmp_path):
    out = tmp_path / "run"
    proc = ibrl("crossplay", "--domain", "telesales", "--role", "buyer", "--scenarios", "2", "--out", str(out),
                "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "telesales-sellers-heldout" in proc.stderr
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert {r["policy_role"] for r in records} == {"buyer"}
    assert {r["policy"] for r in records} == {f"scripted:telesales/{b}" for b in BUYERS}
    assert {r["counterpart"] for r in records} == {f"scripted:telesales/{s}" for s in SELLERS}
