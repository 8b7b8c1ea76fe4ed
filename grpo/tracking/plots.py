"""PNG plots logged with runs and sweeps (matplotlib, headless Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Curve = Sequence[tuple[int, float]]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display on servers / in sweeps
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


# the docs show a plot as wide as their reading column (~1000 px in a 1400 px window) and MLflow's
# artifact view about as wide: legends are sized from the figure's width so that they read at
# TEXT_PX there however many panels it has (7 pt on a three-panel figure showed at ~8 px)
SHOWN_WIDTH_PX = 1000
TEXT_PX = 11
# sharp when opened full size
DPI = 130


def _text_points(fig: Any) -> float:
    """The font size (points) that shows TEXT_PX tall when `fig` is shown SHOWN_WIDTH_PX wide."""
    return max(9.0, TEXT_PX * 72 * float(fig.get_size_inches()[0]) / SHOWN_WIDTH_PX)


def smoothed(values: Sequence[float], window: int) -> list[float]:
    """The trailing mean of each value and the `window - 1` before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


# the reward panels of plots/train_curves.png; the evaluations are marked on them
REWARD_PANELS = ("train/reward", "val/reward")


def plot_train_curves(
    curves: Mapping[str, Curve],
    path: Path,
    title: str = "",
    evals: Mapping[str, tuple[int, float]] | None = None,
) -> Path:
    """One panel per metric (e.g. train/reward, train/kl) over global steps. A per-step reward is
    noisy (a handful of prompts per step): past 10 steps it is drawn faint, with its trailing mean
    over a tenth of the steps on top. `evals` (label -> (step, mean reward), e.g. the baseline
    and final evaluations) are marked on the reward panels, so the trend reads against them."""
    plt = _pyplot()
    names = [n for n, c in curves.items() if c]
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 2.8 * len(names)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        steps, values = zip(*curves[name], strict=True)
        if name == "train/reward" and len(steps) > 10:
            window = max(2, len(steps) // 10)
            ax.plot(steps, values, color="tab:blue", alpha=0.3, linewidth=1, label="per step")
            ax.plot(
                steps,
                smoothed(values, window),
                color="tab:blue",
                linewidth=2,
                label=f"mean of {window} steps",
            )
        else:
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=name)
        if name in REWARD_PANELS:
            for (label, (step, value)), color in zip(
                (evals or {}).items(), ("tab:gray", "tab:red", "tab:green"), strict=False
            ):
                ax.axhline(value, color=color, linestyle="--", linewidth=1)
                ax.plot([step], [value], marker="D", color=color, label=f"eval {label} {value:.3f}")
            ax.legend(loc="best", fontsize=_text_points(fig))
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("global step")
    axes[-1, 0].xaxis.set_major_locator(_integer_ticks())
    if title:
        fig.suptitle(title)
    return _save(plt, fig, path)


def plot_eval_by_function(evals: Mapping[str, Mapping[str, float]], path: Path, title: str = "") -> Path:
    """Grouped bars: one group per reward function, one bar per evaluation (baseline, final, ...)."""
    plt = _pyplot()
    functions = sorted({fn for scores in evals.values() for fn in scores})
    labels = list(evals)
    width = 0.8 / max(len(labels), 1)
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(functions) + 2), 3.6))
    for i, label in enumerate(labels):
        xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(functions))]
        values = [evals[label].get(fn, float("nan")) for fn in functions]
        bars = ax.bar(xs, values, width=width, label=label)
        ax.bar_label(bars, fmt="%.3f", fontsize=_text_points(fig))
    ax.set_xticks(range(len(functions)), functions, rotation=20, ha="right")
    ax.set_ylabel("mean reward")
    ax.legend(fontsize=_text_points(fig))
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    return _save(plt, fig, path)


def plot_reward_curves(curves: Mapping[str, Curve], path: Path, metric: str, title: str = "") -> Path:
    """All jobs of a sweep on one chart: `metric` over global steps, one line per job."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, curve in curves.items():
        if curve:
            steps, values = zip(*curve, strict=True)
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=name)
    ax.set_xlabel("global step")
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if any(curves.values()):
        ax.legend(fontsize=_text_points(fig), loc="best")
    if title:
        ax.set_title(title)
    return _save(plt, fig, path)


# the learned reward model's score in a rewards-by-language panel (TRL: rewards/reward_model/...)
RM_REWARD = "reward_model"


def by_language(names: Sequence[str], prefix: str, suffix: str = "/mean") -> dict[str, dict[str, str]]:
    """Metric names <prefix><a>/<language><suffix> grouped as {language: {a: name}}; `a` may be
    empty (<prefix><language><suffix>, e.g. val/lang/sv/mean)."""
    out: dict[str, dict[str, str]] = {}
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        middle = name[len(prefix) : len(name) - len(suffix)]
        head, _, language = middle.rpartition("/")
        if language:
            out.setdefault(language, {})[head] = name
    return dict(sorted(out.items()))


def plot_rewards_by_language(
    panels: Mapping[str, Mapping[str, Curve]], path: Path, title: str = "", xlabel: str = "global step"
) -> Path:
    """One panel per language, one line per reward function (or arm) over global steps (or what
    `xlabel` says the x values are); a learned reward model's normalised score (RM_REWARD) on its
    own right-hand axis, so where it and the rubric part (reward hacking) shows at a glance."""
    plt = _pyplot()
    languages = [lang for lang, curves in panels.items() if any(curves.values())]
    if not languages:
        raise ValueError(f"{path.name}: no language has a point to plot")
    cols = min(3, len(languages))
    rows = -(-len(languages) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(languages) :]:
        ax.set_visible(False)
    for ax, language in zip(axes.flat, languages, strict=False):
        right = None
        for name, curve in sorted(panels[language].items()):
            if not curve:
                continue
            steps, values = zip(*curve, strict=True)
            if name == RM_REWARD:
                right = ax.twinx()
                right.plot(steps, values, color="tab:red", linestyle="--", label=f"{name} (right axis)")
                right.set_ylabel("RM score (normalised)", color="tab:red", fontsize=_text_points(fig))
            else:
                ax.plot(steps, values, label=name)
        ax.set_title(language)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(_integer_ticks())
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if right is not None:
            more = right.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        ax.legend(handles, labels, fontsize=_text_points(fig), loc="lower right")
    if title:
        fig.suptitle(title)
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
