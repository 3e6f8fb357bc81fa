"""Fidelity to the Lucid artifact's own per-job results on the Venus September trace.

For each baseline: share of jobs whose start time equals the reference, the same counting swaps
of identical jobs, and the average-JCT difference; once with the trace's order for same-second
submissions (job id) and once with the order recovered from the reference FIFO run's starts.
docs/fidelity.md explains the figures. Run: .venv/bin/python bench/bench_fidelity.py
"""

import sys
from pathlib import Path

import pandas as pd

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid"


def main():
    if not VENUS.is_dir():
        sys.exit(f"needs {VENUS} (the shared traces)")
    from lucidd.experiment import make_experiment
    from lucidd.fidelity import match_rates, tie_order_from_reference
    from lucidd.traces import load_trace

    ref = pd.read_csv(VENUS / "reference_results_lucid_artifact.csv.gz")
    est = SHARED / "lucid-artifact" / "extra" / "Venus_Sept_ebm_weekly_updated.csv"
    loaded = load_trace(VENUS / "jobs.csv")
    print(f"{'tie order':10s} {'policy':9s} {'start=ref':>10s} {'w/ swaps':>9s} {'avg JCT':>9s} {'ref JCT':>9s} {'diff':>6s}")
    for mode in ("trace", "recovered"):
        if mode == "recovered":
            loaded.jobs = tie_order_from_reference(loaded.jobs, ref[ref.run == "fifo"])
        exp = make_experiment(loaded, vc_config=VENUS / "vc_config.csv", estimates_path=est)
        for policy in ("fifo", "sjf", "qssf", "srtf", "tiresias"):
            r = exp.run(policy)
            m = match_rates(r.jobs, ref[ref.run == policy])
            print(f"{mode:10s} {policy:9s} {m['start_match']:10.2%} {m['start_match_identical_swaps']:9.2%} "
                  f"{m['avg_jct_s']:9,.0f} {m['ref_avg_jct_s']:9,.0f} {m['avg_jct_rel_diff']:6.2%}")


if __name__ == "__main__":
    main()
