"""Lucid against Tiresias and slurm (and the ablations) on the Venus September trace and Lucid's Philly week.

Both Lucids: `lucid*` is Lucid as lucidd runs it on Slurm (orchestrator/slurm_mode.py: SiteFactor
order, Slurm's backfill, profiling partition over every node), `lucid-standalone*` is Lucid's own
engine as the paper's artifact runs it (places jobs itself, packs, never backfills). Prints, per
trace, each policy's average JCT, average and p99.9 queueing delay and the ratios to Tiresias, plus
one standalone scheduling decision over 10,000 pending jobs.
Run: .venv/bin/python bench/bench_lucid.py [venus|philly ...]
"""

import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"
ARTIFACT = SHARED / "lucid-artifact"
POLICIES = ("tiresias", "slurm", "lucid", "lucid-noprofiler", "lucid-oracle", "lucid-standalone",
            "lucid-standalone-noprofiler", "lucid-standalone-nopacking", "lucid-standalone-oracle")


def experiment(name):
    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace

    if name == "venus":
        exp = make_experiment(load_trace(VENUS / "jobs.csv"), vc_config=VENUS / "vc_config.csv")
        exp.options.update(colocation=str(ARTIFACT / "colocate_info.csv"), profiles=str(ARTIFACT / "single_data.csv"))
        return exp
    # Lucid's Philly week; VCs sized to ~90 % offered load (docs/simulator.md)
    # the earlier weeks train the models (never replayed)
    return make_experiment(load_trace(PHILLY, start="2017-10-01", end="2017-10-08"),
                           prior=load_trace(PHILLY, end="2017-10-01"))


def decision_time():
    """One Lucid decision over 10,000 pending jobs on a busy 32-node VC."""
    import random

    from lucidd.jobs import Job
    from lucidd.policies.base import ClusterView, SchedulingView
    from orchestrator.policy import LucidPolicy

    rng = random.Random(0)
    pending = [Job(i, "a", rng.choice([1, 1, 2, 4, 8, 16]), i, rng.randint(10, 10**5), i) for i in range(10_000)]
    for j in pending:
        j.estimate, j.share_score, j.profile = j.duration * 1.3, rng.choice([0, 1, 2]), {"gmem": 4000}
    policy = LucidPolicy()
    pending.sort(key=policy.pending_key)
    view = SchedulingView(now=20_000, pending=pending, running=[], cluster=ClusterView("a", 8, [1] * 32),
                          context={"forecast": 10.0})
    t = time.perf_counter()
    for _ in range(10):
        policy.schedule(view)
    return (time.perf_counter() - t) / 10


def main(names):
    from lucidd.metrics import summarize

    print(f"one lucid-standalone decision over 10,000 pending jobs: {decision_time() * 1000:.1f} ms")
    for name in names:
        exp = experiment(name)
        print(f"\n== {name}: {len(exp.trace):,} jobs, {exp.spec.describe()[:80]}")
        rows = {}
        for p in POLICIES:
            t = time.perf_counter()
            r = exp.run(p)
            s = summarize(p, r.jobs, r.series, r.total_gpus)
            s["seconds"] = time.perf_counter() - t
            rows[p] = s
        for note in exp.notes:
            print("  note:", note)
        base = rows["tiresias"]
        print(f"  {'policy':27s} {'avg JCT':>9s} {'avg queue':>9s} {'p99.9 q':>9s} {'JCT gain':>8s} {'q ratio':>7s} "
              f"{'p999 ratio':>10s} {'packed':>7s} {'prof.fin':>8s} {'sec':>6s}")
        for p, s in rows.items():
            print(f"  {p:27s} {s['avg_jct_s']:9,.0f} {s['avg_queue_s']:9,.0f} {s['p999_queue_s']:9,.0f} "
                  f"{base['avg_jct_s'] / s['avg_jct_s']:7.3f}x {s['avg_queue_s'] / max(base['avg_queue_s'], 1):7.3f} "
                  f"{s['p999_queue_s'] / max(base['p999_queue_s'], 1):10.3f} {s['packed_jobs']:7,} "
                  f"{s['profiler_finished']:8,} {s['seconds']:6.1f}")
        lower = exp.trace["duration"].mean()
        print(f"  bound: avg JCT >= mean duration = {lower:,.0f} s -> best possible gain over Tiresias "
              f"{base['avg_jct_s'] / lower:.3f}x (1.3x needs {base['avg_jct_s'] / 1.3:,.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:] or ["venus", "philly"])
