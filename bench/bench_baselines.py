"""Speed of the simulator: loading the whole Venus and Philly traces, then every baseline on the
full Venus September trace.

Prints the load times against their targets (Venus 2 s, Philly 3 s), then seconds per policy and
jobs per second (the original simulator takes 280-370 s per policy on this kind of machine).
Run: .venv/bin/python bench/bench_baselines.py
"""

import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"
LOAD_TARGET_S = {"Venus": 2.0, "Philly": 3.0}


def main():
    if not VENUS.is_dir():
        sys.exit(f"needs {VENUS} (the shared traces)")
    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace

    for name, path in (("Venus", VENUS / "jobs.csv"), ("Philly", PHILLY)):
        if path.exists():
            t0 = time.perf_counter()
            n = len(load_trace(path).jobs)
            el = time.perf_counter() - t0
            ok = "met" if el < LOAD_TARGET_S[name] else "NOT met"
            print(f"load {name}: {el:.2f} s for {n:,} jobs (target < {LOAD_TARGET_S[name]:g} s: {ok})")
    t0 = time.perf_counter()
    loaded = load_trace(VENUS / "jobs.csv")
    exp = make_experiment(loaded, vc_config=VENUS / "vc_config.csv",
                          estimates_path=SHARED / "lucid-artifact" / "extra" / "Venus_Sept_ebm_weekly_updated.csv")
    print(f"load + validate: {time.perf_counter() - t0:.2f} s for {len(exp.trace):,} jobs")
    print(f"{'policy':10s} {'seconds':>8s} {'jobs/s':>10s}")
    for policy in ("fifo", "sjf", "qssf", "srtf", "tiresias"):
        t = time.perf_counter()
        exp.run(policy)
        el = time.perf_counter() - t
        print(f"{policy:10s} {el:8.2f} {len(exp.trace) / el:10,.0f}")


if __name__ == "__main__":
    main()
