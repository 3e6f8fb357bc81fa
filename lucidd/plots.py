"""PNG plots of simulation results (rendering only; the data come from SimulationResult)."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")  # headless: the controller has no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_jct_cdf(results, path) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        jct = np.sort(r.jobs["jct_s"].to_numpy(dtype=float))
        if len(jct) == 0:
            continue
        ax.plot(np.maximum(jct, 1), np.arange(1, len(jct) + 1) / len(jct), label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)


def plot_timeline(results, path, origin_s: int | None = None) -> str:
    fig, (ax_q, ax_g) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    t0 = origin_s
    if t0 is None:
        starts = [int(r.series["time"].min()) for r in results if not r.series.empty]
        t0 = min(starts) if starts else 0
    for r in results:
        s = r.series
        if s.empty:
            continue
        hours = (s["time"].to_numpy() - t0) / 3600.0
        ax_q.step(hours, s["queued_jobs"], where="post", label=r.policy, linewidth=0.8)
        ax_g.step(hours, s["busy_gpus"], where="post", label=r.policy, linewidth=0.8)
    if results:
        ax_g.axhline(results[0].total_gpus, color="grey", linestyle="--", linewidth=0.8, label="GPUs")
    ax_q.set_ylabel("queued jobs")
    ax_g.set_ylabel("busy GPUs")
    ax_g.set_xlabel("hours since first submission")
    ax_q.legend(fontsize=8)
    ax_q.grid(alpha=0.3)
    ax_g.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)
