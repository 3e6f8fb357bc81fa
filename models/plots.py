"""PNG rendering of a model's shape functions (rendering only; the data come from
``DurationModel.shape_functions()``, or the same dict read back from JSON).

One figure per term: a single input's contribution over its values, with the spread over the
model's outer bags shaded and how many training jobs had each value below it; a pair's
contribution as a heat map over both inputs. Inputs in seconds or counts that span decades get a
logarithmic axis, so the first minutes are not squeezed into one pixel beside the weeks. An overview
puts the most important terms on one page.
"""

from __future__ import annotations

import math
import os
import re

import matplotlib

matplotlib.use("Agg")  # headless: the controller has no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lucidd.plots import save_figure  # noqa: E402

Y_LABEL = "contribution (log1p s)"
DPI = 100  # a term figure is small; the overview's 3 columns stay under 1,600 px wide


def _log_axis(values) -> bool:
    """A logarithmic x axis when the edges are positive and span more than two decades."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    return len(v) > 2 and min(v) > 0 and max(v) / min(v) > 100


def _draw_main(ax, term: dict, density_ax=None):
    axis = term["axes"][0]
    scores = np.asarray(term["scores"], dtype=float)
    lower = None if term.get("lower") is None else np.asarray(term["lower"], dtype=float)
    upper = None if term.get("upper") is None else np.asarray(term["upper"], dtype=float)
    counts = (term.get("density") or {}).get("counts")
    if axis["type"] == "nominal":
        x = np.arange(len(scores))
        err = None
        if lower is not None and upper is not None:
            err = np.vstack([np.clip(scores - lower, 0, None), np.clip(upper - scores, 0, None)])
        ax.bar(x, scores, yerr=err, color="tab:blue", alpha=0.8, capsize=2)
        labels = [str(v) for v in axis["values"]]
        for target in (ax, density_ax):
            if target is not None:
                target.set_xticks(x)
        (density_ax or ax).set_xticklabels([lb if len(lb) <= 18 else lb[:17] + "…" for lb in labels],
                                           rotation=60 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center",
                                           fontsize=7)
        if density_ax is not None:
            ax.set_xticklabels([])
            if counts is not None and len(counts) == len(x):
                density_ax.bar(x, counts, color="grey")
    else:
        edges = np.asarray(axis["values"], dtype=float)
        ax.stairs(scores, edges, baseline=None, color="tab:blue", linewidth=1.5)
        if lower is not None and upper is not None:
            ax.stairs(upper, edges, baseline=lower, fill=True, color="tab:blue", alpha=0.2)
        if _log_axis(edges):
            ax.set_xscale("log")
        if density_ax is not None:
            d = term.get("density") or {}
            if d.get("edges") and d.get("counts") and len(d["edges"]) == len(d["counts"]) + 1:
                density_ax.stairs(d["counts"], d["edges"], fill=True, color="grey")
            if _log_axis(edges):
                density_ax.set_xscale("log")
            density_ax.set_xlim(ax.get_xlim())
    ax.axhline(0, color="black", linewidth=0.6)
    if term.get("missing"):
        ax.text(0.99, 0.97, f"no value: {term['missing']:+.3f}", transform=ax.transAxes, ha="right", va="top",
                fontsize=7, color="tab:red")
    ax.set_ylabel(Y_LABEL, fontsize=8)
    (density_ax or ax).set_xlabel(axis["feature"], fontsize=8)
    if density_ax is not None:
        density_ax.set_ylabel("jobs", fontsize=8)


def _draw_pair(fig, ax, term: dict):
    scores = np.asarray(term["scores"], dtype=float)  # rows: first input, columns: second
    coords, logs = [], []
    for axis, n in zip(term["axes"], scores.shape):
        if axis["type"] == "nominal" or len(axis["values"]) != n + 1:
            coords.append(np.arange(n + 1) - 0.5)
            logs.append(False)
        else:
            edges = np.asarray(axis["values"], dtype=float)
            coords.append(edges)
            logs.append(_log_axis(edges))
    lim = float(np.nanmax(np.abs(scores))) if scores.size else 1.0
    mesh = ax.pcolormesh(coords[1], coords[0], scores, cmap="RdBu_r", vmin=-lim or -1, vmax=lim or 1)
    fig.colorbar(mesh, ax=ax, label=Y_LABEL)
    if logs[1]:
        ax.set_xscale("log")
    if logs[0]:
        ax.set_yscale("log")
    ax.set_xlabel(term["axes"][1]["feature"], fontsize=8)
    ax.set_ylabel(term["axes"][0]["feature"], fontsize=8)
    for i, (axis, ticks, labels) in enumerate(((term["axes"][1], ax.set_xticks, ax.set_xticklabels),
                                               (term["axes"][0], ax.set_yticks, ax.set_yticklabels))):
        if axis["type"] == "nominal":
            ticks(np.arange(len(axis["values"])))
            labels([str(v)[:17] for v in axis["values"]], fontsize=7, rotation=60 if i == 0 else 0)


def term_figure(term: dict, rank: int | None = None):
    """One term's figure."""
    title = f"{'#' + str(rank) + ' ' if rank else ''}{term['term']} (importance {term['importance']:.3f})"
    if len(term["axes"]) == 1:
        fig, (ax, dax) = plt.subplots(2, 1, figsize=(6.4, 4.8), sharex=term["axes"][0]["type"] != "nominal",
                                      gridspec_kw={"height_ratios": [3, 1]})
        _draw_main(ax, term, dax)
    else:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        _draw_pair(fig, ax, term)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def overview_figure(shapes: dict, top: int = 12, title: str | None = None):
    """The `top` most important terms on one page (pairs as heat maps)."""
    terms = shapes["terms"][:top]
    cols = 3
    rows = max(1, math.ceil(len(terms) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.4 * rows), squeeze=False)
    for i, term in enumerate(terms):
        ax = axes[i // cols][i % cols]
        if len(term["axes"]) == 1:
            _draw_main(ax, term)
        else:
            _draw_pair(fig, ax, term)
        ax.set_title(f"#{i + 1} {term['term']} ({term['importance']:.3f})", fontsize=9)
    for j in range(len(terms), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(title or f"{shapes.get('model', 'model')}: what each term adds to {shapes.get('unit', '')} "
                          f"(intercept {shapes.get('intercept', float('nan')):.3f})", fontsize=11)
    fig.tight_layout()
    return fig


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60] or "term"


def write_shape_plots(shapes: dict, folder: str, prefix: str, top: int = 12) -> list[str]:
    """`{prefix}_terms.png` (the overview) and `{prefix}_{rank:02d}_{term}.png` for every term, in
    `folder` (made if missing); returns their paths, overview first."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    fig = overview_figure(shapes, top)
    paths.append(save_figure(fig, os.path.join(folder, f"{prefix}_terms.png"), dpi=DPI))
    for rank, term in enumerate(shapes["terms"], 1):
        paths.append(save_figure(term_figure(term, rank),
                                 os.path.join(folder, f"{prefix}_{rank:02d}_{_slug(term['term'])}.png"), dpi=DPI))
    return paths
