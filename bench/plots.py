"""The run's overview plot: every figure's ratio against its target, one bar each."""

from __future__ import annotations

from bench.context import Context, save_plot
from bench.figures import Figure


def overview(ctx: Context, figures: list[Figure]) -> None:
    shown = [f for f in figures if f.target is not None and f.ratio is not None]
    if not shown:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.42 * len(shown) + 1.5))
    labels = [f"{f.bench.split(' ', 1)[0]}. {f.name}"[:60] for f in shown]
    colors = ["tab:green" if f.passed else "tab:red" for f in shown]
    y = list(range(len(shown)))[::-1]
    ax.barh(y, [f.ratio for f in shown], color=colors)
    for yi, f in zip(y, shown):
        ax.plot([f.target.ratio, f.target.ratio], [yi - 0.4, yi + 0.4], color="black", linewidth=2)
        ax.text(max(f.ratio, f.target.ratio) * 1.08, yi, f"{f.ratio:.2f}x ({f.target})", va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("ratio to the same-run baseline (black tick: target; green: holds)")
    ax.set_title("laketail against its baselines")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    save_plot(ctx, fig, "overview")
