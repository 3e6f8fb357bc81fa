"""System tuner: propose lucidd's parameters by replaying recent history in the simulator.

The tuner never touches a live configuration. It replays a window of past jobs on the cluster
under the admin's current policy (the reference, Slurm's priority with backfill by default) and
under Lucid as lucidd runs it with candidate values of its config keys (or, for
lucid-standalone, of the paper engine's knobs), and writes a *proposal*: the values (as
lucidd.toml lines), the simulated metrics of the current and proposed settings, and every point
it tried, so an admin can check the reasoning. A new value must beat the current one by more
than `min_gain` to be proposed.

Search: coordinate descent, one parameter at a time over a small grid with the others held at
their best value so far. Simulated metrics along one grid are noisy (one replay per point), so
where a parameter's effect must be monotone the curve is first smoothed with isotonic regression
(pool-adjacent-violators): in lucid-standalone's engine, waiting longer before the starvation
guard fires, or aging the queue more slowly, moves the order towards pure shortest-first and so
can only help the average (avg JCT non-increasing; on Slurm it does not, so `lucid`'s ordering
keys are judged as replayed); a longer profiling limit can only let more jobs finish inside it. The tail
gets no such constraint: a low guard's reservations and drains delay other jobs, so on Venus its
p99.9 *falls* as the guard rises (docs/tuner.md). A value is *feasible* when its
smoothed tail and average queueing delay are no worse than the reference's (within `tail_slack`);
among feasible values the one with the lowest smoothed average JCT wins, ties going to the
current value. Details and the file format: docs/tuner.md.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from lucidd.experiment import Experiment
from lucidd.metrics import summarize

HOUR = 3600
# why a key can change nothing on a cluster (said when every value of its grid replays the same)
_INERT_HINT = {"tprof": " (every run past tprof_s is kept to long_tprof_s when long_share of the profiling "
                          "GPUs is at least the capacity: 134 GPUs or more with the defaults; docs/config.md, "
                          "tprof_s)"}

METRICS = ("avg_jct_s", "avg_queue_s", "p999_queue_s", "profiler_finished", "packed_jobs")


@dataclass(frozen=True)
class TunableParam:
    """One knob: its option key (as `lucidctl simulate` names it), candidate values, and the
    direction each metric must move as the value grows ("up", "down" or None = no constraint)."""

    name: str
    grid: tuple
    trends: dict = field(default_factory=dict)  # metric -> "up" | "down"
    doc: str = ""


def default_space(exp: Experiment, packing: bool = True, variant: str = "lucid") -> list[TunableParam]:
    """The knobs searched for `variant`: lucidd's own config keys for `lucid` (Lucid as lucidd runs
    it on Slurm), the paper engine's knobs for `lucid-standalone*`."""
    if not variant.startswith("lucid-standalone"):
        return lucidd_space(exp)
    nodes = exp.spec.total_nodes
    # 0 = no profiling partition: on a lightly queued cluster the profiler's restarts cost more
    # than the debug jobs it filters save (docs/lucid.md, Philly as one VC).
    cprof = sorted({0} | {max(1, round(nodes * f)) for f in (0.01, 0.015, 0.03, 0.05)})
    space = [
        TunableParam("tprof", (60, 120, 200, 300, 600, 900, 1200, 1800, 3600), {"profiler_finished": "up"},
                     "profiler time limit Tprof (s)"),
        TunableParam("cprof", tuple(cprof), {}, "profiling partition nodes Cprof (0: no profiler)"),
        TunableParam("starvation_s", tuple(h * HOUR for h in (12, 24, 36, 48, 60, 72, 96, 120)),
                     {"avg_jct_s": "down"}, "wait after which a job jumps the queue (s)"),
        # 0 (no aging) is an infinite half-life: last in the grid's order, which the smoothing follows
        TunableParam("aging_halflife_s", tuple(h * HOUR for h in (12, 24, 48, 96, 192, 0)), {"avg_jct_s": "down"},
                     "a waiting job's priority value halves every this many seconds (s)"),
    ]
    if packing:
        space.insert(0, TunableParam("gss", (0, 1, 2), {"packed_jobs": "up"}, "GPU sharing score budget GSS"))
    return space


# The lucidd keys the tuner searches for `lucid`, profiler first and the order after (coordinate
# descent follows the list). Only Tprof's "jobs finished in the profiler" has a known direction: on
# Slurm a later starvation guard is not monotone in the average JCT (docs/lucid.md, "The shipped
# order": 24 h gave 15,375 s at Venus x1.0 against 14,169 s at 12 h), so nothing else is smoothed.
PROFILER_KEYS = ("tprof", "prof_long_tprof", "prof_capacity_gpus", "skip_when_free", "prof_lend", "prof_keep_lent")


def lucidd_space(exp: Experiment) -> list[TunableParam]:
    from lucidd.errors import ConfigError

    from .slurm_mode import live_config

    gpus = exp.spec.total_gpus
    ppd = exp.options.get("points_per_doubling")

    def fits(halflife):  # lucidd refuses an aging half-life whose SiteFactor would overflow
        try:
            live_config({"points_per_doubling": ppd, "aging_halflife_s": halflife})
            return True
        except ConfigError:
            return False

    # 0 = automatic (max(Nprof, 3 % of the GPUs)); then 1.5 %, 6 % and 10 % of the GPUs
    capacity = sorted({0} | {max(1, round(gpus * f)) for f in (0.015, 0.06, 0.10)})
    return [
        TunableParam("tprof", (120, 200, 300, 600, 900, 1200, 1800), {"profiler_finished": "up"},
                     "[profiler] tprof_s"),
        TunableParam("prof_long_tprof", (0, 1800, 3600, 7200), {}, "[profiler] long_tprof_s"),
        TunableParam("prof_capacity_gpus", tuple(capacity), {}, "[profiler] capacity_gpus (0: automatic)"),
        TunableParam("skip_when_free", (1, 0), {}, "[profiler] skip_when_free"),
        TunableParam("prof_lend", (1, 0), {}, "[profiler] lend_idle_gpus"),
        # a per-cluster choice: it pays where partitions lend for long (whole Philly) and costs where
        # wide jobs wait for the reclaims (Venus x1.0; docs/lucid.md, "Lent runs kept until their GPUs
        # are needed")
        TunableParam("prof_keep_lent", (0, 1), {}, "[profiler] keep_lent_while_idle"),
        TunableParam("profiling", (1, 0), {}, "[profiler] enabled"),
        TunableParam("starvation_s", tuple(h * HOUR for h in (6, 12, 24, 48, 96)), {}, "[ordering] starvation_s"),
        TunableParam("starvation_node_cap", (1, 2, 4, 8), {}, "[ordering] starvation_node_cap"),
        TunableParam("starving_halflife_s", (0, 1800, 3600, 7200), {}, "[ordering] starving_halflife_s"),
        TunableParam("aging_halflife_s", tuple(v for v in (h * HOUR for h in (24, 48, 96, 0)) if fits(v)), {},
                     "[ordering] aging_halflife_s"),
    ]


def config_key(option: str):
    """(section, key, type) of lucidd's config for a replay option, or None (a simulator-only knob)."""
    from .slurm_mode import LIVE_OPTIONS

    if option == "profiling":
        return "profiler", "enabled", bool
    if option in LIVE_OPTIONS:
        section, key, kind, _ = LIVE_OPTIONS[option]
        return section, key, kind
    return None


def config_changes(current: dict, proposed: dict) -> dict:
    """{section: {key: value}} of lucidd.toml for the proposed values that differ from the current."""
    out: dict = {}
    for opt, v in proposed.items():
        where = config_key(opt)
        if where is None or current.get(opt) == v:
            continue
        section, key, kind = where
        out.setdefault(section, {})[key] = kind(v)
    return out


def toml_lines(changes: dict) -> list:
    lines = []
    for section, keys in changes.items():
        lines.append(f"[{section}]")
        for key, v in keys.items():
            lines.append(f"{key} = {str(v).lower() if isinstance(v, bool) else v}")
    return lines


@dataclass
class Proposal:
    reference_policy: str
    reference: dict
    current_params: dict
    current: dict
    proposed_params: dict
    proposed: dict
    feasible: bool
    reasons: list
    points: list  # every simulated (params, metrics)
    curves: dict  # param -> list of {value, raw metrics, smoothed metrics, feasible}
    context: dict = field(default_factory=dict)  # what was replayed: trace, format, jobs, window, cluster
    replays: int = 1  # replays per parameter set: the window and its jittered copies (metrics are their mean)
    variant: str = "lucid"  # the Lucid tuned: `lucid` (lucidd on Slurm, its config keys) or `lucid-standalone`

    @property
    def jct_gain(self) -> float:
        """Current avg JCT / proposed avg JCT (> 1: the proposal is better)."""
        return _ratio(self.current["avg_jct_s"], self.proposed["avg_jct_s"])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["jct_gain_vs_current"] = round(self.jct_gain, 4)
        d["jct_gain_vs_reference"] = round(_ratio(self.reference["avg_jct_s"], self.proposed["avg_jct_s"]), 4)
        d["changes"] = {k: {"from": self.current_params.get(k), "to": v}
                        for k, v in self.proposed_params.items() if self.current_params.get(k) != v}
        # the same changes as lucidd.toml keys (empty for lucid-standalone, whose knobs lucidd has not)
        d["config_changes"] = ({} if self.variant.startswith("lucid-standalone") else
                               config_changes(self.current_params, self.proposed_params))
        return d


def _ratio(a, b) -> float:
    if not b:  # a window of zero-length jobs: 0 / 0 is no gain (inf made proposal.json invalid JSON)
        return 1.0 if not a else math.inf
    return float(a) / float(b)


def isotonic(values, y, trend: str) -> np.ndarray:
    """Least-squares fit of `y` over ascending `values` that only goes `trend` ("up"/"down")."""
    from sklearn.isotonic import IsotonicRegression

    x = np.arange(len(values), dtype=float)  # grid order; spacing does not matter for PAV
    return IsotonicRegression(increasing=(trend == "up")).fit_transform(x, np.asarray(y, dtype=float))


# ----- simulation of one parameter set --------------------------------------------------------

_EXPS: list = []  # the window and its jittered copies; set before forking, so workers share the fitted models


def replay_metrics(exp: Experiment, policy: str, params: dict) -> dict:
    """METRICS of one replay of `exp` under `policy` with `params` as experiment options (restored after)."""
    missing = object()
    saved = {k: exp.options.get(k, missing) for k in params}
    exp.options.update(params)
    try:
        r = exp.run(policy)
    finally:
        for k, v in saved.items():
            if v is missing:
                exp.options.pop(k, None)
            else:
                exp.options[k] = v
    s = summarize(policy, r.jobs, r.series, r.total_gpus)
    s.update(r.extra.get("summary", {}))
    return {k: float(s.get(k, 0) or 0) for k in METRICS}


def _simulate(policy: str, params: dict) -> dict:
    """Metrics of one parameter set: the mean over the window and its jittered copies."""
    if "profiling" in params and not policy.startswith("lucid-standalone"):
        # the set's own on/off decides: a `--cprof 0` given as the current value would force every
        # replay off (slurm_mode.live_config), `profiling=1` included
        params = {**params, "cprof": None}
    runs = [replay_metrics(exp, policy, params) for exp in _EXPS]
    return {k: float(np.mean([r[k] for r in runs])) for k in METRICS}


class Tuner:
    def __init__(self, exp: Experiment, space: list[TunableParam] | None = None, reference_policy: str = "slurm",
                 variant: str = "lucid", tail_slack: float = 0.0, rounds: int = 1, workers: int | None = None,
                 log=None, jitter_seeds: int = 0, jitter_s: int = 60, min_gain: float = 0.01):
        self.exp = exp
        # Each parameter set is judged on the window and on `jitter_seeds` copies of it with every
        # submission moved by up to +-jitter_s (Experiment.jittered): one replay of a cluster
        # without preemption is chaotic, and a choice made on it can be one replay's luck.
        self.exps = [exp] + [exp.jittered(seed, jitter_s) for seed in range(1, int(jitter_seeds) + 1)]
        self.variant = variant
        self.space = space if space is not None else default_space(exp, packing=_has_workload(exp), variant=variant)
        self.reference_policy = reference_policy
        self.tail_slack = tail_slack
        # A value other than the current one must lower the average JCT by more than this share to be
        # proposed: a change an admin makes on a live cluster should pay for more than a replay's noise.
        self.min_gain = float(min_gain)
        self.rounds = rounds
        self.workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        self.log = log or (lambda msg: None)
        self._seen: dict[tuple, dict] = {}

    def current_params(self) -> dict:
        from orchestrator.simulation import option_defaults

        defaults = option_defaults(self.exp.spec, self.variant)
        out = {}
        for p in self.space:
            v = self.exp.options.get(p.name)
            if p.name == "profiling" and self.exp.options.get("cprof") == 0:
                v = 0  # --cprof 0: no profiler, as `simulate` reads it
            v = defaults.get(p.name) if v is None else v
            out[p.name] = v if v is None else type(p.grid[0])(v)
        return out

    def _key(self, params: dict) -> tuple:
        return tuple(sorted(params.items()))

    def _run_many(self, param_sets: list[dict]) -> list[dict]:
        global _EXPS
        todo = [p for p in param_sets if self._key(p) not in self._seen]
        uniq = list({self._key(p): p for p in todo}.values())
        _EXPS = self.exps
        if len(uniq) > 1 and self.workers > 1:
            # fork: the workers inherit the experiment with its models already fitted
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(self.workers, len(uniq)), mp_context=ctx) as pool:
                results = list(pool.map(_simulate, [self.variant] * len(uniq), uniq))
        else:
            results = [_simulate(self.variant, p) for p in uniq]
        for p, m in zip(uniq, results):
            self._seen[self._key(p)] = m
            self.log(f"  {self.variant} {p}: avg JCT {m['avg_jct_s']:,.0f} s, p99.9 queue {m['p999_queue_s']:,.0f} s")
        return [self._seen[self._key(p)] for p in param_sets]

    def run(self) -> Proposal:
        global _EXPS
        _EXPS = self.exps
        self.log(f"reference policy {self.reference_policy} ...")
        reference = _simulate(self.reference_policy, {})
        current = self.current_params()
        # Fit the models once in this process (first Lucid replay, on every copy of the window) so
        # forked workers reuse them.
        cur_metrics = self._run_many([current])[0]
        limit_tail = reference["p999_queue_s"] * (1 + self.tail_slack)
        limit_queue = reference["avg_queue_s"] * (1 + self.tail_slack)
        best = dict(current)
        curves, reasons = {}, []
        for _ in range(max(1, self.rounds)):
            for param in self.space:
                sets = [{**best, param.name: v} for v in param.grid]
                raw = self._run_many(sets)
                table = pd.DataFrame(raw)
                smooth = table.copy()
                for metric, trend in param.trends.items():
                    smooth[metric] = isotonic(param.grid, table[metric], trend)
                ok = (smooth["p999_queue_s"] <= limit_tail) & (smooth["avg_queue_s"] <= limit_queue)
                curves[param.name] = [
                    {"value": v, "raw": raw[i], "smoothed": {k: round(float(smooth[k].iloc[i]), 1) for k in METRICS},
                     "feasible": bool(ok.iloc[i]), "off_grid": False} for i, v in enumerate(param.grid)]
                stay = best[param.name]
                if stay in param.grid and len(table[list(METRICS)].drop_duplicates()) == 1:
                    # Every value replays the same: the key changes nothing here, and "lowest avg JCT
                    # among 7/7 values" read as if it had been tuned (an admin trial, tprof_s on a
                    # cluster where every run past it is kept to long_tprof_s).
                    why = (f"{param.name}={stay}: kept; every value of the grid replays the same here "
                           f"({_jct_words(table, smooth, param.grid.index(stay))}): it changes nothing on this "
                           f"cluster{_INERT_HINT.get(param.name, '') if self.variant == 'lucid' else ''}")
                    reasons.append(why)
                    self.log(why)
                    continue
                if stay in param.grid:
                    stay_jct = float(smooth["avg_jct_s"].iloc[param.grid.index(stay)])
                    stay_ok = bool(ok.iloc[param.grid.index(stay)])
                    m = None
                else:  # a current value off the grid: replayed as it is, outside the (smoothed) curve
                    m = self._run_many([dict(best)])[0]
                    stay_jct = m["avg_jct_s"]
                    stay_ok = m["p999_queue_s"] <= limit_tail and m["avg_queue_s"] <= limit_queue
                    curves[param.name].append({"value": stay, "raw": m, "smoothed": {k: round(float(m[k]), 1)
                                                                                      for k in METRICS},
                                               "feasible": bool(stay_ok), "off_grid": True})
                if ok.any():
                    cand = smooth[ok]
                    pick = cand["avg_jct_s"].min()
                    choices = [param.grid[i] for i in cand.index if cand["avg_jct_s"][i] <= pick * (1 + 1e-9)]
                    chosen = stay if stay in choices else choices[0]
                    i = param.grid.index(chosen)
                    if chosen != stay and stay_ok and pick >= stay_jct:
                        why = (f"{param.name}={stay}: kept; it replays better than every other value "
                               f"({stay_jct:,.0f} s avg JCT; the best other, {chosen}: {_jct_words(table, smooth, i)})")
                        chosen = stay
                    elif chosen != stay and stay_ok and pick > stay_jct * (1 - self.min_gain):
                        why = (f"{param.name}={stay}: kept; the best other value, {chosen} "
                               f"({_jct_words(table, smooth, i)}), is {1 - pick / stay_jct:.1%} better on avg JCT, "
                               f"not more than the {self.min_gain:.1%} a change must gain")
                        chosen = stay
                    else:
                        why = (f"{param.name}={chosen}: lowest avg JCT ({_jct_words(table, smooth, i)}) among the "
                               f"{int(ok.sum())}/{len(param.grid)} values whose p99.9 and average queueing delay are "
                               f"no worse than {self.reference_policy}'s")
                elif stay_ok:  # only the current value, off the grid, keeps them
                    chosen = stay
                    why = (f"{param.name}={stay}: kept; it keeps p99.9 and average queueing within "
                           f"{self.reference_policy}'s, and no value of the grid does")
                else:
                    # Least total relative excess over the reference's tail and average queueing,
                    # then the lowest average JCT.
                    excess = ((smooth["p999_queue_s"] / max(limit_tail, 1) - 1).clip(lower=0)
                              + (smooth["avg_queue_s"] / max(limit_queue, 1) - 1).clip(lower=0)).round(3)
                    tied = excess[excess == excess.min()].index
                    i = int(smooth.loc[tied, "avg_jct_s"].idxmin())
                    chosen = param.grid[i]
                    stay_excess = (float(excess.iloc[param.grid.index(stay)]) if stay in param.grid else
                                   round(max(0.0, m["p999_queue_s"] / max(limit_tail, 1) - 1)
                                         + max(0.0, m["avg_queue_s"] / max(limit_queue, 1) - 1), 3))
                    # the same bar as above, on the excess: a change must cut it by more than
                    # min_gain, or keep it and gain that much on the average JCT
                    gains = (stay_excess - excess.iloc[i] > self.min_gain or
                             (stay_excess - excess.iloc[i] >= 0 and
                              float(smooth["avg_jct_s"].iloc[i]) < stay_jct * (1 - self.min_gain)))
                    if chosen != stay and not gains and stay_excess < excess.iloc[i]:
                        why = (f"{param.name}={stay}: kept; no value keeps p99.9 and average queueing within "
                               f"{self.reference_policy}'s, and its excess ({stay_excess:.1%}) is the smallest "
                               f"(the best other, {chosen}: {excess.iloc[i]:.1%})")
                        chosen = stay
                    elif chosen != stay and not gains and stay_excess == excess.iloc[i]:
                        why = (f"{param.name}={stay}: kept; no value keeps p99.9 and average queueing within "
                               f"{self.reference_policy}'s, and the one with the smallest excess, {chosen}, has the "
                               f"same excess as {stay} ({stay_excess:.1%}) and is not {self.min_gain:.1%} better "
                               f"on avg JCT ({_jct_words(table, smooth, i)} against {stay_jct:,.0f} s)")
                        chosen = stay
                    elif chosen != stay and not gains:
                        why = (f"{param.name}={stay}: kept; no value keeps p99.9 and average queueing within "
                               f"{self.reference_policy}'s, and the one with the smallest excess, {chosen} "
                               f"({excess.iloc[i]:.1%} against {stay_excess:.1%}; {_jct_words(table, smooth, i)}), "
                               f"does not gain more than {self.min_gain:.1%}")
                        chosen = stay
                    else:
                        why = (f"{param.name}={chosen}: no value keeps p99.9 and average queueing within "
                               f"{self.reference_policy}'s; picked the smallest excess ({excess.iloc[i]:.1%}), then "
                               f"the lowest avg JCT ({_jct_words(table, smooth, i)})")
                best[param.name] = chosen
                reasons.append(why)
                self.log(why)
        for why in keep_profiler_keys_when_off(best, current):
            reasons.append(why)
            self.log(why)
        proposed = self._run_many([best])[0]
        feasible = proposed["p999_queue_s"] <= limit_tail and proposed["avg_queue_s"] <= limit_queue
        points = [{"params": dict(k), "metrics": m} for k, m in self._seen.items()]
        return Proposal(self.reference_policy, reference, current, cur_metrics, best, proposed, bool(feasible),
                        reasons, points, curves, replays=len(self.exps), variant=self.variant)


def keep_profiler_keys_when_off(best: dict, current: dict) -> list:
    """Without profiling (cprof 0 or profiling 0 in `best`) the profiler's keys have no effect, and
    a change of one would be a replay's noise: put them back to `current`. Returns the reasons."""
    off = best.get("cprof") == 0 or best.get("profiling") == 0
    reasons = []
    for key in PROFILER_KEYS:
        if off and key in best and best[key] != current.get(key):
            best[key] = current.get(key)
            reasons.append(f"{key}={best[key]}: kept, since {'cprof=0' if best.get('cprof') == 0 else 'profiling=0'} "
                           f"turns the profiler off and {key} then has no effect")
    return reasons


def _jct_words(raw: pd.DataFrame, smooth: pd.DataFrame, i: int) -> str:
    """A grid point's avg JCT as replayed, and the smoothed figure the choice used where it differs."""
    r, s = float(raw["avg_jct_s"].iloc[i]), float(smooth["avg_jct_s"].iloc[i])
    if round(r) == round(s):
        return f"{r:,.0f} s replayed"
    return f"{s:,.0f} s on the smoothed curve, {r:,.0f} s replayed"


def _has_workload(exp: Experiment) -> bool:
    return all(c in exp.trace for c in ("gpu_util", "gmem_util", "gmem"))


def write_proposal(proposal: Proposal, out_dir) -> dict:
    """proposal.json (everything) and tuning_points.csv (one row per simulated parameter set)."""
    os.makedirs(out_dir, exist_ok=True)
    d = proposal.to_dict()
    with open(os.path.join(out_dir, "proposal.json"), "w") as fh:
        json.dump(d, fh, indent=2, default=float)
    rows = [{**p["params"], **p["metrics"]} for p in proposal.points]
    pd.DataFrame(rows).to_csv(os.path.join(out_dir, "tuning_points.csv"), index=False)
    return d


def format_proposal(proposal: Proposal) -> str:
    ref, cur, new = proposal.reference, proposal.current, proposal.proposed
    lines = []
    ctx = proposal.context or {}
    if ctx.get("trace"):
        window = ctx.get("window") or {}
        span = "" if not (window.get("start") or window.get("end")) else \
            f", submitted {window.get('start') or 'start'} .. {window.get('end') or 'end'}"
        n = int(ctx.get("jobs", 0))
        lines += [f"replayed: {ctx['trace']} ({n:,} job{'s' if n != 1 else ''}{span}) on {ctx.get('cluster', '?')}", ""]
    w = max([17] + [len(k) for k in proposal.proposed_params])

    def shown(k, v):  # lucidd's booleans as the TOML lines write them
        where = config_key(k)
        return str(bool(v)).lower() if where is not None and where[2] is bool and v is not None else str(v)

    lines.append(f"{'parameter':{w}s} {'current':>10s}  {'proposed':>12s}")
    for k, v in proposal.proposed_params.items():
        mark = "" if proposal.current_params.get(k) == v else "   <- change"
        lines.append(f"{k:{w}s} {shown(k, proposal.current_params.get(k)):>10s}  {shown(k, v):>12s}{mark}")
    lines.append("")
    lines.append(f"{'simulated':{w}s} {proposal.reference_policy:>10s} {'current':>12s} {'proposed':>12s}")
    for m in ("avg_jct_s", "avg_queue_s", "p999_queue_s", "profiler_finished", "packed_jobs"):
        lines.append(f"{m:{w}s} {ref[m]:10,.0f} {cur[m]:12,.0f} {new[m]:12,.0f}")
    lines.append("")
    lines.append(f"avg JCT gain: {proposal.jct_gain:.3f}x vs current, "
                 f"{_ratio(ref['avg_jct_s'], new['avg_jct_s']):.3f}x vs {proposal.reference_policy}; "
                 + ("tail and average queueing no worse than the reference" if proposal.feasible
                    else "WARNING: the tail or average queueing is worse than the reference"))
    each = ("single replays (--jitter-seeds N: means over N jittered copies too)" if proposal.replays <= 1 else
            f"means over {proposal.replays} replays (the window and {proposal.replays - 1} jittered copies)")
    lines.append(f"why (one parameter at a time; the table's figures are {each}, and where a parameter's "
                 "effect must be monotone the choice used the smoothed curve, docs/tuner.md):")
    lines.extend(f"  - {r}" for r in proposal.reasons)
    changes = proposal.to_dict()["config_changes"]
    if changes:
        lines.append("")
        lines.append("to apply it, set in lucidd.toml (then restart lucidd; docs/config.md):")
        lines.extend(f"  {line}" for line in toml_lines(changes))
        if proposal.replays < 6:
            # one replay of a cluster without preemption is chaotic: on the sample a 3-replay
            # "1.112x" was worth 1.036x over eleven (docs/tuner.md, "Jittered replays")
            lines.append(f"  (judged on {proposal.replays} replay{'s' if proposal.replays > 1 else ''}: confirm with "
                         "--jitter-seeds 5 or more before applying it)")
    lines.append("This is a proposal only: no configuration was changed.")
    return "\n".join(lines)


def history_window(jobs: pd.DataFrame, spec, start: int, end: int, origin=None, options: dict | None = None,
                   path: str = "history") -> Experiment:
    """Replay the jobs submitted in [start, end) on `spec` (the cluster as it is now). Jobs before
    `start` are the models' training history. Jobs of VCs the cluster no longer has, or larger
    than their VC, are dropped and counted in the experiment's notes."""
    window = jobs[(jobs["submit_time"] >= start) & (jobs["submit_time"] < end)]
    caps = {k: v.gpus for k, v in spec.vcs.items()}
    fits = window["vc"].map(caps).fillna(0) >= window["gpu_num"]
    exp = Experiment(trace=window[fits].reset_index(drop=True), spec=spec, path=path, origin=origin,
                     options=dict(options or {}))
    prior = jobs[jobs["submit_time"] < start]
    exp.prior = prior if len(prior) else None
    if (~fits).any():
        exp.notes.append(f"{int((~fits).sum())} history job(s) dropped: their VC is not in the cluster or too small")
    return exp
