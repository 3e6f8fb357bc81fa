"""Load sweep (issue 11): every policy at several cluster sizes, with Lucid's ratios to the baselines.

Points: Venus September 2020 on its VC config x 0.8, 1.0, 1.25, and whole Philly (82,247 jobs, VCs
sized from the trace) x 1, 1.5, 2 (`lucidctl simulate --scale-nodes F`). Policies: fifo, slurm,
qssf, tiresias and lucid (Lucid as lucidd runs it on Slurm, shipped defaults, no S-Lab files).
Per point it prints the offered load, each policy's avg JCT / avg queue / p99.9 queue / GPU
utilisation / replay seconds, then Lucid's ratios to Tiresias, QSSF and slurm (other / lucid:
above 1 means Lucid is better) and the checks of issue 11.

Each point is the same as one command, e.g.
  .venv/bin/lucidctl simulate --trace ../shared/traces/helios_venus_sept2020_lucid/jobs.csv \\
      --vc-config ../shared/traces/helios_venus_sept2020_lucid/vc_config.csv --scale-nodes 0.8 \\
      --policies fifo,slurm,qssf,tiresias,lucid --no-plots
Run: .venv/bin/python bench/bench_sweep.py [--points venus:0.8,philly:2] [--policies ...]
     [--cache DIR] (replays already in DIR are read back instead of run again; each is a
     summary JSON plus the per-job CSV, so a change to one policy re-runs only that policy
     with --fresh POLICY).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"
POINTS = ("venus:0.8", "venus:1.0", "venus:1.25", "philly:1", "philly:1.5", "philly:2")
POLICIES = ("fifo", "slurm", "qssf", "tiresias", "lucid")


def experiment(point: str):
    from dataclasses import replace

    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace

    if point.startswith("vc:"):  # one Venus VC's jobs on a cluster of N nodes (as --nodes N)
        _, vc, nodes = point.split(":")
        loaded = load_trace(VENUS / "jobs.csv")
        loaded = replace(loaded, jobs=loaded.jobs[loaded.jobs["vc"] == vc].reset_index(drop=True))
        return make_experiment(loaded, nodes=int(nodes))
    name, factor = point.split(":")
    f = float(factor)
    if name == "venus":
        return make_experiment(load_trace(VENUS / "jobs.csv"), vc_config=VENUS / "vc_config.csv", scale_nodes=f)
    return make_experiment(load_trace(PHILLY), scale_nodes=f)


def command(point: str, policies) -> str:
    if point.startswith("vc:"):
        _, vc, nodes = point.split(":")
        return (f"Venus' {vc} jobs only (no CLI filter: bench/bench_sweep.py builds it) as "
                f"`lucidctl simulate --nodes {nodes} --policies {','.join(policies)}`")
    name, factor = point.split(":")
    if name == "venus":
        src = ("--trace ../shared/traces/helios_venus_sept2020_lucid/jobs.csv "
               "--vc-config ../shared/traces/helios_venus_sept2020_lucid/vc_config.csv")
    else:
        src = "--trace ../shared/traces/philly_sia_completed/philly.csv"
    return f".venv/bin/lucidctl simulate {src} --scale-nodes {factor} --policies {','.join(policies)} --no-plots"


def parse_policy(p: str):
    """`lucid[starvation_s=43200;aging_halflife_s=0]` -> ("lucid", {...}): a policy with experiment
    options (the replay's knobs, docs/simulator.md), as a label of its own."""
    if "[" not in p:
        return p, {}
    name, _, rest = p.partition("[")
    opts = {}
    for kv in rest.rstrip("]").split(";"):
        if kv:
            k, _, v = kv.partition("=")
            opts[k.strip()] = int(float(v)) if float(v) == int(float(v)) else float(v)
    return name, opts


def offered_load(exp) -> float:
    from lucidd.metrics import offered_load as load

    return load(exp.trace, exp.spec.total_gpus)


def per_vc(jobs) -> dict:
    """{vc: [jobs, avg JCT s]}: what each partition's users see."""
    g = jobs.groupby("vc")["jct_s"]
    return {str(vc): [int(n), round(float(m), 1)] for vc, n, m in zip(g.size().index, g.size(), g.mean())}


def idle_while_pending(jobs, spec) -> dict | None:
    """GPU-hours left idle in a partition while some of its jobs pend, summed over partitions; of
    those, the hours while a job of a whole node or more pends, by the fewest GPUs any pending job
    of the partition asks for (where the idle is fragments no pending job can use: docs/lucid.md,
    "vcWoR's tail"). Only where each job's [start, end) is all it held: None for a replay with
    preemption or profiling runs, whose other runs the per-job frame does not list."""
    if ("preemptions" in jobs and (jobs["preemptions"] > 0).any()) or (
            "profiled" in jobs and jobs["profiled"].fillna(False).astype(bool).any()):
        return None
    idle = wide = 0.0
    by_fewest = {}
    for vc, part in jobs.groupby("vc"):
        vs = spec.vcs[str(vc)]
        total, gpn = vs.gpus, vs.gpus_per_node
        events = []
        for sub, start, end, g in zip(part["submit_time"], part["start_time"], part["end_time"], part["gpu_num"]):
            events += [(float(start), 2, int(g)), (float(end), 0, -int(g)), (float(sub), 1, int(g))]
        events.sort(key=lambda e: (e[0], e[1]))  # at one instant: ends, submissions, then starts
        pending = {}  # GPUs asked -> jobs pending
        busy, t0 = 0, events[0][0] if events else 0.0
        for t, kind, g in events:
            if t > t0 and pending and busy < total:
                gpu_s = (t - t0) * (total - busy)
                idle += gpu_s
                if max(pending) >= gpn:
                    wide += gpu_s
                    fewest = min(pending)
                    by_fewest[fewest] = by_fewest.get(fewest, 0.0) + gpu_s
            t0 = t
            if kind == 1:
                pending[g] = pending.get(g, 0) + 1
            elif kind == 2:
                busy += g
                pending[g] -= 1
                if not pending[g]:
                    del pending[g]
            else:
                busy += g
    return {"gpu_h": round(idle / 3600, 1), "wide_gpu_h": round(wide / 3600, 1),
            "wide_by_fewest_gpus": {str(k): round(v / 3600, 1) for k, v in sorted(by_fewest.items())}}


def vc_line(lucid: dict, slurm: dict) -> str | None:
    """The partition whose users lose most under `lucid` against `slurm` (avg JCT), and how many
    partitions (and jobs) lose more than 10 %: a cluster-wide gain can hide one partition's loss."""
    a, b = lucid.get("vc_avg_jct_s"), slurm.get("vc_avg_jct_s")
    if not a or not b or len(a) < 2:
        return None
    ratios = {vc: (n, m / b[vc][1]) for vc, (n, m) in a.items() if vc in b and b[vc][1] > 0}
    worst = max(ratios, key=lambda vc: ratios[vc][1])
    over = [vc for vc, (_, r) in ratios.items() if r > 1.1]
    return (f"   per partition vs slurm (avg JCT): worst {worst} {ratios[worst][1]:.2f}x ({ratios[worst][0]:,} jobs); "
            f"{len(over)} of {len(ratios)} partitions more than 10 % worse "
            f"({sum(ratios[vc][0] for vc in over):,} jobs)")


def run_point(point, policies, cache: Path | None, fresh=()):
    """{policy: summary row (+ seconds)}; per-job frames land in the cache as jobs_<policy>.csv."""
    from lucidd.metrics import summarize

    exp = None
    rows = {}
    pdir = cache / point.replace(":", "_x") if cache else None
    for p in policies:
        fname = p.replace("[", "(").replace("]", ")").replace(";", ",")
        if pdir is not None and (pdir / f"{fname}.json").exists() and p not in fresh:
            rows[p] = json.loads((pdir / f"{fname}.json").read_text())
            if "vc_avg_jct_s" not in rows[p] and (pdir / f"jobs_{fname}.csv").exists():  # cached before the key
                import pandas as pd

                rows[p]["vc_avg_jct_s"] = per_vc(pd.read_csv(pdir / f"jobs_{fname}.csv"))
            continue
        if exp is None:
            exp = experiment(point)
        name, opts = parse_policy(p)
        model_s = 0.0
        if name.startswith("lucid") and "estimates" not in exp.options.get("_cache", {}):
            from orchestrator.simulation import duration_estimates

            t = time.perf_counter()  # the duration model's weekly refits, shared by every Lucid run
            duration_estimates(exp)
            model_s = time.perf_counter() - t
        saved = dict(exp.options)
        exp.options.update(opts)
        t = time.perf_counter()
        try:
            r = exp.run(name)
        finally:
            exp.options.clear()
            exp.options.update(saved)
        s = summarize(p, r.jobs, r.series, r.total_gpus)
        s.update(r.extra.get("summary", {}))
        s["seconds"] = round(time.perf_counter() - t, 2)  # the replay, without the model fit
        s["model_s"] = round(model_s, 1)
        if "profiler" in r.extra and "requeued" in r.extra["profiler"]:
            s["profiler"] = r.extra["profiler"]
        s["vc_avg_jct_s"] = per_vc(r.jobs)
        s["idle_while_pending"] = idle_while_pending(r.jobs, exp.spec)
        s["offered_load"] = offered_load(exp)
        s["nodes"] = exp.spec.total_nodes
        rows[p] = s
        if pdir is not None:
            pdir.mkdir(parents=True, exist_ok=True)
            r.jobs.to_csv(pdir / f"jobs_{fname}.csv", index=False)
            (pdir / f"{fname}.json").write_text(json.dumps(s, default=float))
        print(f"  [{point}] {p}: {s['seconds']:.1f} s" + (f" (+ {model_s:.1f} s fitting the duration model)"
                                                          if model_s else ""), file=sys.stderr, flush=True)
    return rows


def report(point, rows, policies) -> list[dict]:
    any_row = next(iter(rows.values()))
    print(f"\n== {point}: {any_row['jobs']:,} jobs, {any_row['nodes']} nodes, offered load "
          f"{any_row['offered_load'] * 100:.1f} %")
    print(f"   {command(point, policies)}")
    w = max(9, *(len(p) for p in policies))
    print(f"   {'policy':{w}s} {'avg_jct_s':>10s} {'avg_queue_s':>11s} {'p999_queue_s':>12s} {'gpu_util':>8s} "
          f"{'prof.fin':>8s} {'seconds':>8s}")
    for p in policies:
        s = rows[p]
        print(f"   {p:{w}s} {s['avg_jct_s']:10,.0f} {s['avg_queue_s']:11,.0f} {s['p999_queue_s']:12,.0f} "
              f"{s['gpu_util']:8.3f} {int(s.get('profiler_finished', 0)):8,} {s['seconds']:8.1f}")
    for p in policies:
        st = rows[p].get("profiler")
        if st:
            print(f"   {p}: profiled {st['profiled']:,}, finished there {st['finished_in_profiler']:,}, requeued "
                  f"{st['requeued']:,} ({st['lost_gpu_s'] / 3600:,.0f} GPU-h lost), unprofiled after waiting "
                  f"2 x Tprof {st['released_after_wait']:,}, longest wait for a profiling slot "
                  f"{st['max_profiling_wait_s']:,} s")
    for p in policies:
        idle = rows[p].get("idle_while_pending")
        if idle:
            fewest = ", ".join(f"{k}: {v:,.0f}" for k, v in idle["wide_by_fewest_gpus"].items())
            print(f"   {p}: {idle['gpu_h']:,.0f} GPU-h idle while jobs pend, {idle['wide_gpu_h']:,.0f} of them while "
                  f"a whole-node job pends (by the fewest GPUs a pending job asks, {fewest or 'none'})")
    checks = []
    if "lucid" not in rows:
        return checks
    lu = rows["lucid"]

    def ratio(a, b):
        return a / b if b else float("inf") if a else 1.0

    print(f"   lucid vs  {'JCT x':>7s} {'queue x':>8s} {'p99.9 x':>8s}   (other / lucid: > 1 means Lucid is better)")
    for ref in ("tiresias", "qssf", "slurm"):
        if ref in rows:
            r = rows[ref]
            print(f"   {ref:9s} {ratio(r['avg_jct_s'], lu['avg_jct_s']):7.3f} "
                  f"{ratio(r['avg_queue_s'], lu['avg_queue_s']):8.3f} {ratio(r['p999_queue_s'], lu['p999_queue_s']):8.3f}")

    if "slurm" in rows and (line := vc_line(lu, rows["slurm"])):
        print(line)

    def check(name, ok, detail):
        checks.append({"point": point, "check": name, "ok": bool(ok), "detail": detail})

    if "qssf" in rows:
        q = rows["qssf"]
        check("avg JCT <= qssf", lu["avg_jct_s"] <= q["avg_jct_s"], f"{lu['avg_jct_s']:,.0f} vs {q['avg_jct_s']:,.0f}")
        d = (q["gpu_util"] - lu["gpu_util"]) * 100
        check("GPU util >= qssf - 2 points", d <= 2, f"{lu['gpu_util']:.3f} vs {q['gpu_util']:.3f} ({-d:+.1f} pt)")
    if "slurm" in rows:
        s = rows["slurm"]
        check("avg JCT <= slurm", lu["avg_jct_s"] <= s["avg_jct_s"], f"{lu['avg_jct_s']:,.0f} vs {s['avg_jct_s']:,.0f}")
        check("p99.9 queue <= slurm", lu["p999_queue_s"] <= s["p999_queue_s"],
              f"{lu['p999_queue_s']:,.0f} vs {s['p999_queue_s']:,.0f}")
    if "tiresias" in rows:
        t = rows["tiresias"]
        g = ratio(t["avg_jct_s"], lu["avg_jct_s"])
        if point in ("venus:1.0", "venus:1.25"):
            check("JCT >= 1.03x tiresias", g >= 1.03, f"{g:.3f}x")
            check("avg queue <= tiresias", lu["avg_queue_s"] <= t["avg_queue_s"],
                  f"{lu['avg_queue_s']:,.0f} vs {t['avg_queue_s']:,.0f}")
            check("p99.9 queue <= tiresias", lu["p999_queue_s"] <= t["p999_queue_s"],
                  f"{lu['p999_queue_s']:,.0f} vs {t['p999_queue_s']:,.0f}")
        if point.startswith("philly"):
            check("JCT >= 0.9x tiresias", g >= 0.9, f"{g:.3f}x")
    baselines = [rows[p]["seconds"] for p in policies if not p.startswith("lucid")]
    if point.startswith("philly") and baselines:  # `--policies lucid` alone: no baseline to time against
        slowest = max(baselines)
        check("replay <= 5x slowest baseline", lu["seconds"] <= 5 * slowest,
              f"{lu['seconds']:.1f} s vs {slowest:.1f} s ({lu['seconds'] / slowest:.1f}x)")
    for c in checks:
        print(f"   {'ok  ' if c['ok'] else 'MISS'} {c['check']}: {c['detail']}")
    return checks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default=",".join(POINTS))
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma-separated; a policy may carry replay options: lucid[prof_gate=1;starvation_s=43200]")
    ap.add_argument("--cache", help="folder for replays (read back when present)")
    ap.add_argument("--fresh", default="", help="policies to replay again even when cached")
    args = ap.parse_args(argv)
    if not VENUS.is_dir() or not PHILLY.is_file():
        sys.exit(f"needs {VENUS} and {PHILLY} (the shared traces)")
    policies = [p for p in args.policies.split(",") if p]
    cache = Path(args.cache) if args.cache else None
    fresh = {p for p in args.fresh.split(",") if p}
    checks = []
    for point in args.points.split(","):
        rows = run_point(point, policies, cache, fresh)
        checks += report(point, rows, policies)
    if checks:
        missed = [c for c in checks if not c["ok"]]
        print(f"\n{len(checks) - len(missed)} of {len(checks)} checks met"
              + ("".join(f"\n  MISS {c['point']}: {c['check']} ({c['detail']})" for c in missed)))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
