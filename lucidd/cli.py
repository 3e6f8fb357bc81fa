"""`lucidctl`: the admin CLI. `simulate` replays a trace under several policies.

Output contract (scripted against; extend, don't rename): see docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import __version__
from .errors import LucidError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lucidctl", description="Admin CLI of lucidd, the Lucid GPU scheduler for Slurm.")
    p.add_argument("--json", action="store_true", help="machine-readable output (schema in docs/cli.md)")
    p.add_argument("--version", action="version", version=f"lucidctl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("simulate", help="replay a job trace under several policies and compare them")
    s.add_argument("--trace", default="sample", help="trace file, or 'sample' for the bundled sample (default)")
    s.add_argument("--format", choices=["helios", "venus", "philly", "csv"], help="trace format (default: detect from header)")
    s.add_argument("--vc-config", help="VC config CSV (VC name, node count); default: bundled one for the sample, "
                                       "else sized from the trace (docs/simulator.md)")
    s.add_argument("--policies", default=None,
                   help="comma-separated policies (default: all known); e.g. fifo,sjf,qssf,srtf,tiresias")
    s.add_argument("--out", default="sim-out", help="output directory (default: ./sim-out)")
    s.add_argument("--start", help="only jobs submitted at/after this (seconds since trace origin, or a date)")
    s.add_argument("--end", help="only jobs submitted before this (seconds since trace origin, or a date)")
    s.add_argument("--no-prior", action="store_true",
                   help="with --start: do not train Lucid's models on the jobs submitted before the window")
    s.add_argument("--nodes", type=int, help="without --vc-config: one VC of this many nodes for all jobs")
    s.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    s.add_argument("--estimates", help="CSV of duration estimates for QSSF (job_id,estimate_s; or the artifact's job_id,priority)")
    lucid = s.add_argument_group("Lucid policy (docs/lucid.md)")
    lucid.add_argument("--colocation", help="co-location measurement table (pair speeds) for packing labels and shared progress")
    lucid.add_argument("--profiles", help="per-workload profile table (model,dataset,batchsize,amp,gpu_util,gmem_util,gmem)")
    lucid.add_argument("--tprof", type=int, help="profiler time limit Tprof in seconds (default 200)")
    lucid.add_argument("--cprof", type=int, help="profiling partition nodes Cprof (default ~1.5%% of nodes, at least 1)")
    lucid.add_argument("--nprof", type=int, help="largest job (GPUs) that is profiled, Nprof (default 8)")
    lucid.add_argument("--gss", type=int, help="GPU sharing score budget GSS (default 2; 0 disables packing)")
    lucid.add_argument("--starvation-s", type=int, help="wait after which a job jumps the queue (default 345600 = 96 h)")
    lucid.add_argument("--aging-halflife-s", type=int,
                       help="a waiting job's priority value (estimate x GPUs) halves every this many seconds "
                            "(default 172800 = 48 h; 0: no aging)")
    s.add_argument("--skip-bad-rows", action="store_true", help="drop malformed trace rows (counted and reported) instead of failing")
    s.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    sub.add_parser("status", help="daemon status (needs a running lucidd)")
    sub.add_parser("queue", help="pending jobs in lucidd's order (needs a running lucidd)")
    e = sub.add_parser("explain", help="explain a decision: `explain job ID`")
    e.add_argument("what", choices=["job"])
    e.add_argument("id")
    e.add_argument("--sim-out", help="explain a job of a simulation output directory instead of the live daemon")

    t = sub.add_parser("tune", help="propose Lucid parameters by replaying recent history (changes nothing)")
    t.add_argument("--trace", default="sample", help="job history (trace file, or 'sample')")
    t.add_argument("--format", choices=["helios", "venus", "philly", "csv"], help="trace format (default: detect)")
    t.add_argument("--vc-config", help="the cluster as it is now (VC name, node count); default: sized from the history")
    t.add_argument("--nodes", type=int, help="without --vc-config: one VC of this many nodes")
    t.add_argument("--gpus-per-node", type=int, default=8)
    t.add_argument("--start", help="replay jobs submitted at/after this (earlier jobs only train the models)")
    t.add_argument("--end", help="replay jobs submitted before this")
    t.add_argument("--reference", default="tiresias", help="the policy to beat without a worse tail (default tiresias)")
    t.add_argument("--tail-slack", type=float, default=0.0, help="allowed relative excess of p99.9/avg queue over the reference")
    t.add_argument("--workers", type=int, help="parallel replays (default: up to 4 CPUs)")
    t.add_argument("--out", default="tune-out", help="where proposal.json and tuning_points.csv go (default ./tune-out)")
    for flag in ("--colocation", "--profiles"):
        t.add_argument(flag, help="as for simulate")
    for flag in ("--tprof", "--cprof", "--nprof", "--gss", "--starvation-s", "--aging-halflife-s"):
        t.add_argument(flag, type=int, help="current value (default: lucidd's default)")

    im = sub.add_parser("import-sacct", help="turn this cluster's `sacct --json` history into a trace for simulate "
                                             "(docs/traces.md)")
    src = im.add_mutually_exclusive_group()
    src.add_argument("--json-file", metavar="FILE", help="saved `sacct --json --allusers --duplicates ...` output")
    src.add_argument("--live", action="store_true", help="run `sacct --json --allusers --duplicates` now")
    im.add_argument("--start", metavar="DATE", help="only jobs submitted at/after this date/time (local time, as "
                                                    "sacct; --live default: 30 days before --end)")
    im.add_argument("--end", metavar="DATE", help="only jobs submitted before this date/time (--live default: now)")
    im.add_argument("--sinfo-json", metavar="FILE",
                    help="saved `sinfo --json` output, for --vc-config-out (--live reads sinfo itself)")
    im.add_argument("--out", required=True, metavar="FILE", help="the trace CSV to write (lucidd's csv format)")
    im.add_argument("--vc-config-out", metavar="FILE",
                    help="also write a VC config CSV (vc,nodes,gpus_per_node) from sinfo")
    im.add_argument("--keep-cpu-jobs", action="store_true",
                    help="keep jobs without GPUs, as 1-GPU jobs (default: dropped and counted)")
    im.add_argument("--default-vc", metavar="NAME",
                    help="VC of jobs that ran only in lucidd's partitions with no recorded request")
    im.add_argument("--lucid-partitions", metavar="LIST",
                    help="lucidd's own partitions, never a VC (default: inbox,profiling)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    try:
        if args.command == "simulate":
            return cmd_simulate(args)
        if args.command == "tune":
            return cmd_tune(args)
        if args.command == "explain" and args.sim_out:
            from .explain_cli import explain_sim_job

            return explain_sim_job(args)
        if args.command == "import-sacct":
            from .sacct_import import cmd_import_sacct

            return cmd_import_sacct(args)
        raise LucidError(f"'{args.command}' talks to the lucidd daemon, which arrives with the live-cluster issue; "
                         "use `lucidctl simulate` meanwhile")
    except LucidError as exc:
        print(f"lucidctl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lucidctl: interrupted", file=sys.stderr)
        return 130


def _experiment_from_args(args, what: str):
    """The trace window, its cluster and Lucid's options as `simulate` and `tune` both take them.
    Jobs before `--start` are loaded as training history for the models (unless --no-prior)."""
    from .experiment import make_experiment
    from .traces import load_trace, sample_trace_path, sample_vc_config_path

    trace_path, vc_config = args.trace, args.vc_config
    if trace_path == "sample":
        trace_path = sample_trace_path()
        vc_config = vc_config or sample_vc_config_path()
    skip_bad = getattr(args, "skip_bad_rows", False)
    loaded = load_trace(trace_path, args.format, start=args.start, end=args.end, skip_bad_rows=skip_bad)
    if len(loaded.jobs) == 0:
        raise LucidError(f"{loaded.path}: no jobs left to {what} ({loaded.report()})")
    prior = None
    if args.start is not None and not getattr(args, "no_prior", False):
        prior = load_trace(trace_path, args.format, end=args.start, skip_bad_rows=True)
    exp = make_experiment(loaded, vc_config=vc_config, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          estimates_path=getattr(args, "estimates", None), prior=prior)
    exp.options.update({k: getattr(args, k) for k in ("colocation", "profiles", "tprof", "cprof", "nprof", "gss",
                                                       "starvation_s", "aging_halflife_s")})
    return loaded, exp


def cmd_simulate(args) -> int:
    from .experiment import DEFAULT_POLICIES, known_policies, progress_bar, write_results
    from .metrics import format_table

    known = known_policies()
    if args.policies:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in policies if p not in known]
        if unknown:
            raise LucidError(f"unknown policy {', '.join(unknown)}; known: {', '.join(known)}")
    else:
        policies = [p for p in known if p in DEFAULT_POLICIES or p == "lucid"]
    loaded, exp = _experiment_from_args(args, "simulate")
    if not args.json:
        print(loaded.report())
        print(f"cluster: {exp.spec.describe()}")
    results, timings = [], {}
    for policy in policies:
        t0 = time.perf_counter()
        with progress_bar(len(exp.trace), policy, enabled=not args.no_progress) as bar:
            results.append(exp.run(policy, on_progress=bar.update))
        timings[policy] = time.perf_counter() - t0
    summary = write_results(results, args.out, plots=not args.no_plots)
    if any(p.startswith("lucid") for p in policies):  # the models behind `lucidctl explain job ID --sim-out`
        from orchestrator.artifacts import save_models

        save_models(exp, args.out)
    if args.json:
        print(json.dumps({
            "trace": loaded.path, "format": loaded.fmt, "jobs": int(len(exp.trace)), "dropped": loaded.dropped,
            "cluster": {k: {"nodes": v.nodes, "gpus_per_node": v.gpus_per_node} for k, v in exp.spec.vcs.items()},
            "out": os.path.abspath(args.out), "summary": summary.to_dict("records"),
            "seconds": {k: round(v, 3) for k, v in timings.items()}, "notes": exp.notes,
        }, indent=2, default=str))
    else:
        for note in exp.notes:
            print(f"note: {note}")
        print()
        print(format_table(summary.to_dict("records")))
        print()
        print(f"wrote {os.path.join(args.out, 'summary.csv')} and jobs_<policy>.csv"
              + ("" if args.no_plots else ", jct_cdf.png, timeline.png") + f" to {args.out}/")
    return 0


def cmd_tune(args) -> int:
    from orchestrator.tuner import Tuner, format_proposal, write_proposal

    _, exp = _experiment_from_args(args, "replay")
    log = (lambda msg: None) if args.json else (lambda msg: print(msg, file=sys.stderr))
    proposal = Tuner(exp, reference_policy=args.reference, tail_slack=args.tail_slack, workers=args.workers,
                     log=log).run()
    d = write_proposal(proposal, args.out)
    if args.json:
        print(json.dumps(d, indent=2, default=float))
    else:
        print(format_proposal(proposal))
        print(f"wrote {os.path.join(args.out, 'proposal.json')} and tuning_points.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
