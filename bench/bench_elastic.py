"""Elastic mode on DL2's workload: heuristics, Optimus-oracle, Optimus with online fitting (and DL2
when a trained policy is given), on fixed seeds; prints the table and checks issue 13's figures.

Setting: DL2's parameters.py without LARGE_SCALE: 96 nodes of 8 CPU + 8 GPU slots, 60 jobs per
trace, Google-trace arrivals of peak 3 per 20-minute slot, 30,000 max epochs, at most 16 PS and 16
workers per job; 10 traces drawn one after another from seed 9973 (DL2's np_seed). The 48-node
setting of DL2's params_template.py is printed for DRF and Optimus-oracle too.

Run: .venv/bin/python bench/bench_elastic.py [--traces 10] [--seed 9973] [--nodes 96] [--dl2-model FILE]
(reads ../shared/dl2; about 2-4 minutes on 2 cores, most of it Optimus' online fitting).
"""

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lucidd.elastic.experiment import make_elastic_experiment, optimus_fit_errors  # noqa: E402


def avg_jct(exp, name):
    t0 = time.process_time()
    if name.startswith("event-"):
        vals = [exp.avg_jct_slots(name, i) for i in range(len(exp.traces))]
        return sum(vals) / len(vals), [], time.process_time() - t0
    runs = [exp.run(name, i) for i in range(len(exp.traces))]
    cpu = time.process_time() - t0
    return sum(r.avg_jct_slots() for r in runs) / len(runs), runs, cpu


RIGID = ["event-fifo", "event-tiresias", "event-lucid", "event-slurm", "rigid-fifo"]


def table(exp, names, drf, skip=()):
    print(f"{'policy':16s} {'avg JCT (slots)':>15s} {'avg JCT (s)':>12s} {'x DRF':>7s} {'CPU s':>7s}")
    out = {}
    for n in names:
        if n in skip:
            continue
        v, runs, cpu = avg_jct(exp, n)
        out[n] = (v, runs)
        print(f"{n:16s} {v:15.3f} {v * exp.cluster.slot_s:12,.0f} {v / drf:7.3f} {cpu:7.1f}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=10)
    ap.add_argument("--seed", type=int, default=9973)
    ap.add_argument("--nodes", type=int, default=96)
    ap.add_argument("--dl2-model", help="a trained DL2 policy (lucidctl dl2-train / bench/bench_dl2.py)")
    ap.add_argument("--skip", default="", help="comma-separated policies to leave out ('small': the 24-node table)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    exp = make_elastic_experiment(nodes=args.nodes, seed=args.seed, n_traces=args.traces, dl2_model=args.dl2_model)
    print(f"dl2 workload: {args.traces} traces x {exp.workload.num_jobs} jobs, Google-trace arrivals (peak "
          f"{exp.workload.max_arrivals}/slot), seed {args.seed}; cluster {exp.cluster.describe()}")
    names = ["drf", "fifo", "srtf", "tetris", "optimus-oracle", "optimus"] + (["dl2"] if args.dl2_model else [])
    drf = avg_jct(exp, "drf")[0]
    print()
    res = table(exp, names, drf, skip)
    rows = {n: (v,) for n, (v, _) in res.items()}
    runs = {n: r for n, (_, r) in res.items()}
    print(f"\nrigid shapes (k PS + k workers per job type: {exp.shapes}); event-* = the event-driven "
          "simulator, a bundle as the unit, 2 per node; rigid-fifo = the slot engine")
    table(exp, RIGID, drf, skip)
    ok = True
    if "optimus-oracle" in rows:
        r = rows["optimus-oracle"][0] / drf
        good = abs(r - 0.68) <= 0.05
        ok &= good
        print(f"\nOptimus-oracle / DRF = {r:.3f} (target 0.68 +- 0.05: {'met' if good else 'NOT met'})")
    if "optimus" in rows and "optimus-oracle" in rows:
        r = rows["optimus"][0] / rows["optimus-oracle"][0]
        good = abs(r - 1) <= 0.10
        ok &= good
        print(f"Optimus (online fitting) / Optimus-oracle = {r:.3f} (target within 10 %: {'met' if good else 'NOT met'})")
        per = {}
        for run in runs["optimus"]:
            for m, d in optimus_fit_errors(run, exp.speeds).items():
                agg = per.setdefault(m, {"s": 0.0, "n": 0, "r": [], "skipped": 0})
                agg["s"] += d["speed_mape"] * d["speed_n"]
                agg["n"] += d["speed_n"]
                agg["skipped"] += d["skipped"]
                agg["r"].append(d["remaining_mape"])
        print(f"\n{'job type':26s} {'speed MAPE':>10s} {'slots':>6s} {'left out':>8s} {'remaining-epochs MAPE':>22s}")
        worst = 0.0
        for m in exp.consts.models:
            if m not in per:
                continue
            a = per[m]
            mape = a["s"] / max(a["n"], 1)
            worst = max(worst, mape)
            import numpy as np

            print(f"{m:26s} {100 * mape:9.1f}% {a['n']:6d} {a['skipped']:8d} {100 * float(np.nanmean(a['r'])):21.1f}%")
        good = worst <= 0.10
        ok &= good
        print(f"speed-model error per type <= 10 %: {'met' if good else 'NOT met'} (worst {100 * worst:.1f} %)")
    if args.nodes == 96 and not {"drf", "optimus-oracle"} & skip:
        e48 = make_elastic_experiment(nodes=48, seed=args.seed, n_traces=args.traces)
        d48 = avg_jct(e48, "drf")[0]
        o48 = avg_jct(e48, "optimus-oracle")[0]
        print(f"\n48 nodes (DL2's params_template.py): DRF {d48:.3f} slots, Optimus-oracle {o48:.3f} slots, "
              f"ratio {o48 / d48:.3f}")
    if args.nodes == 96 and "small" not in skip:
        e24 = make_elastic_experiment(nodes=24, seed=args.seed, n_traces=args.traces)
        d24 = avg_jct(e24, "drf")[0]
        print("\n24 nodes (a cluster where rigid jobs queue; same traces):")
        table(e24, ["drf", "optimus-oracle"] + RIGID, d24, skip)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
