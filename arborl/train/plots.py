"""PNG learning curves of a run (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

from arborl.train.runlog import read_metrics


def plot_learning_curves(run_dir: str | Path, history: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if "train/success" in r]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    if records:
        ax.plot(
            [r["step"] for r in records],
            [r["train/success"] for r in records],
            label="train rollouts",
            alpha=0.6,
        )
    ev = history.get("eval", [])
    if ev:
        ax.plot([s for s, _ in ev], [v for _, v in ev], "o-", label="held-out eval")
    for key, style in (("before", "--"), ("after", ":")):
        h = history.get(key)
        if h:
            ax.axhspan(h["success_lo"], h["success_hi"], alpha=0.1)
            ax.axhline(h["success"], linestyle=style, label=f"{key} RL: {h['success']:.3f}")
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    ax = axes[1]
    for key in ("actor/pg_loss", "actor/entropy", "actor/approx_kl", "train/rows_with_signal"):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), float)]
        if pts:
            ax.plot(*zip(*pts), label=key)
    ax.set_xlabel("RL step")
    ax.legend(loc="best")
    fig.tight_layout()
    out = run_dir / "learning_curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
