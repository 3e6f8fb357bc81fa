"""PNG plots of simulation results (rendering only; the data come from SimulationResult).

Both figures name the trace and the cluster in their title (`title`), and give every policy its
own colour and line style. The timeline draws one row of panels per policy, so lines never lie on
top of each other: queued jobs on a shared symmetric-log axis (a queue of 5 stays visible next to
FIFO's 2,000) and busy GPUs on a shared linear axis with the labelled capacity line.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")  # headless: the controller has no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, SymmetricalLogLocator  # noqa: E402

_COLORS = plt.get_cmap("tab10").colors
_STYLES = ("-", "--", "-.", ":")


def _style(i: int) -> dict:
    return {"color": _COLORS[i % len(_COLORS)], "linestyle": _STYLES[(i // len(_COLORS) + i) % len(_STYLES)]}


def _thousands(v, _pos=None) -> str:
    return f"{v:,.0f}"


def plot_jct_cdf(results, path, title: str | None = None) -> str:
    return save_figure(jct_cdf_figure(results, title), path)


def plot_timeline(results, path, origin_s: int | None = None, title: str | None = None) -> str:
    return save_figure(timeline_figure(results, origin_s, title), path)


def save_figure(fig, path, dpi: int = 110) -> str:
    """Write `fig` as a PNG and free it (figures left open pile up in a long run); returns the path."""
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return os.fspath(path)


def jct_cdf_figure(results, title: str | None = None):
    """One CDF line per policy, each with its own colour and line style, on a log time axis."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, r in enumerate(results):
        jct = np.sort(r.jobs["jct_s"].to_numpy(dtype=float))
        if len(jct) == 0:
            continue
        ax.plot(np.maximum(jct, 1), np.arange(1, len(jct) + 1) / len(jct), linewidth=1.5,
                label=f"{r.policy} (avg {jct.mean():,.0f} s)", **_style(i))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs with a smaller JCT")
    ax.set_ylim(0, 1.01)
    ax.set_title("JCT CDF" + (f"\n{title}" if title else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def timeline_figure(results, origin_s: int | None = None, title: str | None = None):
    """One row per policy: queued jobs (shared symlog axis) and busy GPUs (shared, with capacity)."""
    shown = [r for r in results if not r.series.empty] or list(results)
    rows = max(1, len(shown))
    fig, axes = plt.subplots(rows, 2, figsize=(12, 1.2 + 1.45 * rows), sharex=True, squeeze=False)
    t0 = origin_s
    if t0 is None:
        starts = [int(r.series["time"].min()) for r in shown if not r.series.empty]
        t0 = min(starts) if starts else 0
    ends = [int(r.series["time"].max()) for r in shown if not r.series.empty]
    span_s = (max(ends) - t0) if ends else 0
    unit, per = ("days", 86400.0) if span_s > 3 * 86400 else ("hours", 3600.0)
    peak_q = max([int(r.series["queued_jobs"].max()) for r in shown if not r.series.empty] or [1])
    capacity = max([int(r.total_gpus) for r in shown] or [0])
    for i, r in enumerate(shown):
        ax_q, ax_g = axes[i]
        st = {"color": _COLORS[i % len(_COLORS)], "linestyle": "-"}  # one line per panel: colour is enough
        s = r.series
        if not s.empty:
            x = (s["time"].to_numpy() - t0) / per
            q = s["queued_jobs"].to_numpy()
            g = s["busy_gpus"].to_numpy()
            ax_q.step(x, q, where="post", linewidth=0.9, **st)
            ax_q.fill_between(x, q, step="post", alpha=0.15, color=st["color"])
            ax_g.step(x, g, where="post", linewidth=0.9, **st)
            ax_g.fill_between(x, g, step="post", alpha=0.15, color=st["color"])
            dt = np.diff(s["time"].to_numpy(dtype=float))
            timed = len(dt) > 0 and dt.sum() > 0
            mean_q = np.average(q[:-1], weights=dt) if timed else float(q.mean())
            ax_q.text(0.995, 0.93, f"peak {int(q.max()):,}, time-average {mean_q:,.0f}",
                      transform=ax_q.transAxes, ha="right", va="top", fontsize=7)
            if capacity and timed:
                ax_g.text(0.995, 0.06, f"time-average {np.average(g[:-1], weights=dt):,.0f} busy",
                          transform=ax_g.transAxes, ha="right", va="bottom", fontsize=7)
        ax_q.set_ylabel(r.policy, rotation=0, ha="right", va="center", fontsize=10, color=st["color"],
                        fontweight="bold")
        ax_q.set_yscale("symlog", linthresh=1)
        ax_q.set_ylim(0, peak_q * 1.6 + 1)
        ax_q.yaxis.set_major_locator(SymmetricalLogLocator(base=10, linthresh=1))
        ax_q.yaxis.set_major_formatter(FuncFormatter(_thousands))
        ax_g.set_ylim(0, capacity * 1.2 if capacity else None)
        ax_g.yaxis.set_major_formatter(FuncFormatter(_thousands))
        if capacity:
            ax_g.axhline(capacity, color="black", linestyle="--", linewidth=0.8)
            ax_g.text(0.005, capacity * 1.02, f"capacity: {capacity:,} GPUs", transform=ax_g.get_yaxis_transform(),
                      ha="left", va="bottom", fontsize=7)
        for ax in (ax_q, ax_g):
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
    axes[0][0].set_title("queued jobs (log scale)", fontsize=9)
    axes[0][1].set_title("busy GPUs", fontsize=9)
    axes[-1][0].set_xlabel(f"{unit} since first submission")
    axes[-1][1].set_xlabel(f"{unit} since first submission")
    fig.suptitle("Queue and busy GPUs over time, one row per policy" + (f"\n{title}" if title else ""), fontsize=10)
    fig.tight_layout()
    return fig
