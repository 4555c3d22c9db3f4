"""Report mends of issue 48 req 7 (and req 1's header): content parts as text and what the
model saw in each agent call, no "Search trees" section or link on a run without trees,
the diagnostics of several runs side by side, and a run's errored episodes in the header."""

import json
import re

from arborl.report import write_report
from arborl.report.episodes import content_text, seen_text


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


PARTS = [{"type": "text", "text": "New task:"}, {"type": "text", "text": "price of milk?"}]


def test_content_parts_render_as_text_and_the_call_as_what_was_seen():
    assert content_text(json.dumps(PARTS)) == "New task:\nprice of milk?"
    assert content_text(PARTS + [{"type": "image_url"}]) == "New task:\nprice of milk?\n[image_url]"
    assert content_text("[not json") == "[not json" and content_text(None) == ""
    msgs = [
        {"role": "system", "content": "You shop."},
        {"role": "user", "content": PARTS},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "content": "42"},
    ]  # fmt: skip
    assert seen_text(msgs) == (
        "system: You shop.\nuser: New task:\nprice of milk?\nassistant:  [calls lookup]\ntool: 42"
    )


def test_agent_turns_show_text_and_what_the_model_saw(tmp_path, run_factory):
    run = run_factory(tmp_path, "agent", 2)
    ev = run / "eval_episodes" / "step-00000.jsonl"
    eps = [json.loads(x) for x in ev.read_text().splitlines()]
    eps[0]["steps"][0]["observation"] = json.dumps(PARTS)
    eps[0]["steps"][0]["info"]["messages"] = [{"role": "user", "content": PARTS}]
    ev.write_text("".join(json.dumps(e) + "\n" for e in eps))
    html = write_report([run]).read_text()
    turn = next(e for e in _data(html)["episodes"] if e["source"] == "eval")["turns"][0]
    assert turn["obs"] == "New task:\nprice of milk?"
    assert turn["seen"] == "user: New task:\nprice of milk?"
    assert 'id="trees-h"' not in html  # no trees: no section, and report.js adds no link


def test_two_runs_show_diagnostics_and_errored_episodes(tmp_path, run_factory):
    a, b = run_factory(tmp_path, "a", 3), run_factory(tmp_path, "b", 3)
    for run, entropy in ((a, [1.5, 1.2, 0.9]), (b, [1.4, 1.4, 1.3])):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "train/success" in r]
        for r, e in zip(steps, entropy, strict=False):
            r.update({"actor/entropy": e, "adv/groups_with_signal": 0.5})
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = json.loads((b / "summary.json").read_text())
    summary["failures"] = {
        "episodes": {"before": 4, "rl": 8, "after": 4}, "errored": {"before": 4, "rl": 8, "after": 4},
        "first_error": "agent timeout: the agent ran past timeout_s=1", "rows_trained": 0,
        "total_episodes": 16, "total_errored": 16, "verdict": "all_errored",
        "hint": "raise agent_program.timeout_s",
    }  # fmt: skip
    (b / "summary.json").write_text(json.dumps(summary))
    html = write_report([a, b], out=tmp_path / "cmp.html").read_text()
    table = re.search(r'<table class="runs" id="diagnostics-table">(.*?)</table>', html, re.S)
    rows = table.group(1).split("<tr>")[2:]
    assert "<td>1.500 → 0.900</td>" in rows[0] and "<td>1.400 → 1.300</td>" in rows[1]
    assert "<td>0.500 → 0.500</td>" in rows[0] and "<td>16 of 16</td>" in rows[1]
    assert "finished, learned nothing" in html
    assert "16 of 16 episodes errored (before RL 4 of 4, RL 8 of 8, after RL 4 of 4; first " in html
    assert "What to change: raise agent_program.timeout_s" in html
