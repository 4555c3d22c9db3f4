"""`write_report` and `arborl report`: a self-contained page, one run or several."""

import json
import re

import pytest
import yaml

from arborl.cli.main import main
from arborl.report import write_report
from arborl.report.baselines import read_baselines
from tests.report.conftest import HOSTILE_TEXT, make_hostile_run


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_page_is_self_contained(runs) -> None:
    html = write_report([runs[0]]).read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)  # nothing fetched
    assert "plotly.js (basic - minified) v4.1.1" in html
    data = _data(html)
    assert len(data["episodes"]) == 9 and len(data["pairs"]) == 4
    assert "algo:" in html and "lr: 0.001" in html  # the resolved config, as YAML


def test_two_runs_overlay_and_show_config_differences(runs, tmp_path, capsys) -> None:
    out = tmp_path / "cmp.html"
    assert main(["report", str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    html = out.read_text()
    diff = re.search(r'<table class="diff" id="config-diff">(.*?)</table>', html, re.S).group(1)
    assert "<code>algo.lr</code>" in diff and "0.0003" in diff and diff.count("<tr>") == 2
    train = next(c for c in _data(html)["charts"] if c["id"] == "m-training-success")
    assert [t["name"] for t in train["traces"]] == ["a: train/success", "b: train/success"]


def test_several_runs_need_out_and_a_bad_dir_is_named(runs, tmp_path, capsys) -> None:
    assert main(["report", str(runs[0]), str(runs[1])]) == 2
    assert "need --out FILE" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "missing' does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="pass out="):
        write_report([runs[0], runs[1]])


def test_partial_run_is_marked_and_episodes_capped(tmp_path, run_factory) -> None:
    run = run_factory(tmp_path, "crash", 3, finished=False)
    html = write_report([run], episodes_per_point=2).read_text()
    assert '<span class="partial">partial</span>' in html
    assert len(_data(html)["episodes"]) == 2 + 1  # 2 of the 4 held-out, 1 training


def test_baselines_are_computed_once_and_cached(tmp_path, run_factory) -> None:
    run = run_factory(tmp_path, "nobase", 2, baselines=False)
    cfg = {"env": {"id": "arborl/Maze-v0"}, "eval": {"num_episodes": 20, "seed": 7}}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    write_report([run])
    rows = json.loads((run / "baselines.json").read_text())
    assert rows["oracle"]["success"] == 1.0  # the maze oracle always wins
    assert rows["random"]["success"] < 0.5 and rows["random"]["episodes"] == 20
    r = rows["random"]  # the bounds under the names every other table uses
    assert 0.0 <= r["success_lo"] <= r["success"] <= r["success_hi"] <= 1.0
    (run / "baselines.json").write_text(json.dumps({"random": {"success": 0.123}}))
    html = write_report([run]).read_text()  # read, not recomputed
    assert "random: 0.123" in html


def test_an_old_runs_baselines_named_success_rate_still_draw(tmp_path, run_factory) -> None:
    """Runs and `arborl eval --json` files written before success had one name call it
    `success_rate`; `arborl report` reads them as `success` (bench/results holds such)."""
    run = run_factory(tmp_path, "old", 2, baselines=False)
    old = {"random": {"success_rate": 0.123, "success_lo": 0.1, "success_hi": 0.2}}
    (run / "baselines.json").write_text(json.dumps(old))
    assert read_baselines(run)["random"] == {"success": 0.123, "success_lo": 0.1, "success_hi": 0.2}
    assert "random: 0.123" in write_report([run]).read_text()
    rows = [{"policy": "oracle", "success_rate": 1.0}, {"policy": "mine", "success_rate": 0.5}]
    (run / "baselines.json").write_text(json.dumps({"rows": rows}))  # an old eval --json file
    assert read_baselines(run) == {"oracle": {"policy": "oracle", "success": 1.0}}
    assert "oracle: 1.000" in write_report([run]).read_text()


def test_a_long_run_stays_small(tmp_path, run_factory) -> None:
    run = run_factory(tmp_path, "long", 5000)
    html = write_report([run], max_points=300).read_text()
    charts = _data(html)["charts"]
    assert max(len(t["x"]) for c in charts for t in c["traces"]) == 300  # thinned from 5000
    assert len(html) < 1_200_000 + 600_000  # Plotly (1.2 MB) + data


def _strict_json(text: str):
    """`json.loads` as strict as `JSON.parse`: NaN, Infinity and -Infinity are errors."""

    def refuse(token):
        raise ValueError(f"{token} is not JSON (JSON.parse rejects it)")

    return json.loads(text, parse_constant=refuse)


def test_any_text_and_any_float_reach_the_page_intact(tmp_path) -> None:
    run = make_hostile_run(tmp_path)
    html = write_report([run]).read_text()
    start = html.index('<script type="application/json" id="report-data">')
    block = html[html.index(">", start) + 1 : html.index("</script>", start)]
    # no `<` at all, so no tokenizer state (comment, double escape, end tag) can start
    # inside the block: it ends at its own </script> and the two scripts after it run
    assert not set(block) & set("<>&\u2028\u2029")
    assert html[start:].count("<script") == 3
    data = _strict_json(block)
    ep = next(e for e in data["episodes"] if e["instruction"] == HOSTILE_TEXT["instruction"])
    turn = ep["turns"][0]
    assert (turn["obs"], turn["action"], turn["response"]) == (
        HOSTILE_TEXT["observation"],
        HOSTILE_TEXT["action"],
        HOSTILE_TEXT["response"],
    )
    assert turn["reward"] == "NaN" and ep["return"] == "Infinity"  # shown by name
    assert [e["return"] for e in data["episodes"][:2]] == ["Infinity", "-Infinity"]
    env = next(c for c in data["charts"] if c["id"] == "m-reward-components-(per-episode)")
    ys = next(t["y"] for t in env["traces"] if t["name"] == "reward/env")
    assert ys == ["NaN", 0.2]  # steps 1, 2: the NaN is a named gap, the rest untouched
    std = next(c for c in data["charts"] if c["id"] == "m-adv-std")
    assert std["traces"][0]["y"] == [0.5, "Infinity"]
