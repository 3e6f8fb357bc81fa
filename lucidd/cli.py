"""`lucidctl`: the admin CLI. `simulate` replays a trace under several policies.

Output contract (scripted against; extend, don't rename): see docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from . import __version__
from .errors import ConfigError, EmptyWindowError, LucidError


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error contract: one line `lucidctl: error: ...`, exit status 2."""

    def error(self, message):
        sub = self.prog.split(" ", 1)[1] + " " if " " in self.prog else ""
        self.exit(2, f"lucidctl: error: {message} (see `lucidctl {sub}--help`)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lucidctl", description="Admin CLI of lucidd, the Lucid GPU scheduler for Slurm.")
    p.add_argument("--json", action="store_true", help="machine-readable output (schema in docs/cli.md)")
    p.add_argument("--version", action="version", version=f"lucidctl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    # `lucidctl status --json` is how many will type it: take it after the command as well.
    # SUPPRESS: when absent there, the value before the command stands.
    sub_json = argparse.ArgumentParser(add_help=False)
    sub_json.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                          help="as before the command: machine-readable output")
    _add_parser = sub.add_parser
    sub.add_parser = lambda *a, **k: _add_parser(*a, parents=[sub_json], **k)  # noqa: E731

    s = sub.add_parser("simulate", help="replay a job trace under several policies and compare them")
    s.add_argument("--trace", default="sample", help="trace file, or 'sample' for the bundled sample (default)")
    s.add_argument("--format", choices=["helios", "venus", "philly", "csv"], help="trace format (default: detect from header)")
    s.add_argument("--vc-config", help="VC config CSV (VC name, node count); default: bundled one for the sample, "
                                       "else sized from the trace (docs/simulator.md)")
    s.add_argument("--policies", default=None,
                   help="comma-separated policies (default: the baselines and lucid); e.g. tiresias,lucid or "
                        "fifo,sjf,qssf,srtf,tiresias,lucid")
    s.add_argument("--out", default="sim-out", help="output directory (default: ./sim-out)")
    s.add_argument("--start", help="only jobs submitted at/after this (seconds since trace origin, or a date)")
    s.add_argument("--end", help="only jobs submitted before this (seconds since trace origin, or a date)")
    s.add_argument("--no-prior", action="store_true",
                   help="with --start: do not train Lucid's models on the jobs submitted before the window")
    s.add_argument("--nodes", type=int, help="without --vc-config: one VC of this many nodes for all jobs")
    s.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8; 1-64)")
    s.add_argument("--estimates", help="CSV of duration estimates for QSSF (job_id,estimate_s; or the artifact's job_id,priority)")
    lucid = s.add_argument_group("Lucid policy (docs/lucid.md)")
    lucid.add_argument("--colocation", help="co-location measurement table (pair speeds) for packing labels and shared progress")
    lucid.add_argument("--profiles", help="per-workload profile table (model,dataset,batchsize,amp,gpu_util,gmem_util,gmem)")
    lucid.add_argument("--tprof", type=int, help="profiler time limit Tprof in seconds (default: lucidd's 600 for lucid, "
                       "200 for lucid-standalone; >= 1)")
    lucid.add_argument("--cprof", type=int, help="profiling partition nodes Cprof (default ~1.5%% of nodes, at least 1; "
                                                 "0: no profiler; fewer than the cluster's nodes)")
    lucid.add_argument("--nprof", type=int, help="largest job (GPUs) that is profiled, Nprof (default 8; 1 to the "
                                                 "profiling partition's GPUs)")
    lucid.add_argument("--gss", type=int, help="GPU sharing score budget GSS (default 2; 0 disables packing; 0-4)")
    lucid.add_argument("--starvation-s", type=int,
                       help="wait after which a job jumps the queue (default: lucid 43200 = 12 h, as lucidd ships; "
                            "lucid-standalone 345600 = 96 h; >= 1)")
    lucid.add_argument("--starving-halflife-s", type=int,
                       help="lucid only: among starving jobs, a job's submission counts this many seconds later per "
                            "doubling of estimate x GPUs (default 3600, as lucidd ships; 0: oldest first)")
    lucid.add_argument("--long-tprof-s", type=int,
                       help="lucid only: Tprof of a profiling run on GPUs nobody waits for, and of the oldest "
                            "runs past --tprof within long_share (6%%) of the profiling GPUs (default 3600, as lucidd "
                            "ships; 0: --tprof for every run)")
    lucid.add_argument("--no-lend", action="store_true",
                       help="lucid only: profiling stays within its capacity and borrows no GPU of a partition "
                            "nobody waits in (lucidd's [profiler] lend_idle_gpus = false; default: it borrows)")
    lucid.add_argument("--aging-halflife-s", type=int,
                       help="a waiting job's priority value (estimate x GPUs) halves every this many seconds "
                            "(default: lucid 0 = no aging, as lucidd ships; lucid-standalone 172800 = 48 h; "
                            "0: no aging)")
    lucid.add_argument("--config", metavar="LUCIDD_TOML",
                       help="replay lucid with this lucidd config's [profiler] and [ordering] keys and [daemon] "
                            "interval_s (the flags above override it; default: lucidd's defaults)")
    s.add_argument("--skip-bad-rows", action="store_true", help="drop malformed trace rows (counted and reported) instead of failing")
    s.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    s.add_argument("--scale-nodes", type=float, metavar="F",
                   help="what-if sizing: every VC's node count x F, rounded, never below its largest job (e.g. 0.8)")
    slurm = s.add_argument_group("slurm baseline (docs/simulator.md)")
    slurm.add_argument("--limit-rule", metavar="RULE",
                       help="users' time limits from durations: increasing hours to round up to (default "
                            "1,2,4,8,12,24,48,72,168), 'exact', or 'xF' (F x duration, F >= 1)")
    slurm.add_argument("--bf-window", type=int, metavar="MINUTES",
                       help="Slurm's SchedulerParameters bf_window for the slurm baseline and lucid's Slurm "
                            "(default 1440, Slurm's): a job that cannot start within it gets no reservation")
    from .elastic.cli import add_simulate_arguments

    add_simulate_arguments(s)  # --workload dl2: the elastic mode (docs/elastic.md)

    live_help = "lucidd's config file, for its database (default $LUCIDD_CONFIG or /etc/lucidd/lucidd.toml)"
    st = sub.add_parser("status", help="the live daemon: health, last reconcile and its latency, jobs by phase")
    st.add_argument("--config", help=live_help)
    q = sub.add_parser("queue", help="the live daemon: profiling queue and pending jobs in lucidd's order")
    q.add_argument("--config", help=live_help)
    q.add_argument("-u", "--user", metavar="LIST",
                   help="only these users' jobs (comma-separated); ranks stay those among all jobs")
    q.add_argument("--me", action="store_true", help="only the jobs of the user running lucidctl")
    ac = sub.add_parser("actions", help="the live daemon: what it did to jobs in Slurm, newest first (an audit log)")
    ac.add_argument("--config", help=live_help)
    ac.add_argument("--since", metavar="WHEN", default="24h",
                    help="how far back: a duration (90s, 30m, 2h, 7d), a date (2026-11-28 or 2026-11-28T09:30, local "
                         "time) or Unix seconds (default 24h)")
    ac.add_argument("--kind", metavar="LIST", help="only these kinds (comma-separated): profile, requeue, release, "
                                                   "sitefactor, signal, shards, close_inbox")
    ac.add_argument("--status", metavar="LIST", help="only these statuses (comma-separated): applied, failed, planned, "
                                                     "dry-run")
    ac.add_argument("-u", "--user", metavar="LIST", help="only actions on these users' jobs (comma-separated)")
    ac.add_argument("--limit", type=int, default=200, metavar="N", help="at most N actions (default 200)")
    mo = sub.add_parser("models", help="the live daemon: its duration model, what it looks at, and its refits")
    mo.add_argument("--config", help=live_help)
    mo.add_argument("--plot", metavar="DIR",
                    help="also write what the model learnt, term by term, to DIR: a PNG per term, an overview "
                         "PNG, and the same data as JSON (duration_vN_shapes.json)")
    e = sub.add_parser("explain", help="explain a decision: `explain job ID` (live daemon, or --sim-out DIR)")
    e.add_argument("--config", help=live_help)
    # Checked in main, not with choices=: argparse would call the argument "job" in its error.
    e.add_argument("what", metavar="job", help="what to explain (only `job` so far)")
    e.add_argument("id", metavar="ID", help="the job id, as in the trace")
    e.add_argument("--sim-out", help="explain a job of a simulation output directory instead of the live daemon")

    t = sub.add_parser("tune", help="propose Lucid parameters by replaying recent history (changes nothing)")
    t.add_argument("--trace", default="sample", help="job history (trace file, or 'sample')")
    t.add_argument("--format", choices=["helios", "venus", "philly", "csv"], help="trace format (default: detect)")
    t.add_argument("--vc-config", help="the cluster as it is now (VC name, node count); default: sized from the history")
    t.add_argument("--nodes", type=int, help="without --vc-config: one VC of this many nodes")
    t.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8; 1-64)")
    t.add_argument("--start", help="replay jobs submitted at/after this (earlier jobs only train the models)")
    t.add_argument("--end", help="replay jobs submitted before this")
    t.add_argument("--reference", default="slurm",
                   help="the policy the cluster runs today, to beat without a worse tail (default slurm: Slurm's "
                        "priority with backfill)")
    t.add_argument("--variant", choices=["lucid", "lucid-standalone"], default="lucid",
                   help="the Lucid tuned: lucid (as lucidd runs it on Slurm; proposes lucidd.toml keys, default) "
                        "or lucid-standalone (the paper's engine and its knobs)")
    t.add_argument("--config", metavar="LUCIDD_TOML",
                   help="lucidd config whose [profiler]/[ordering] values are the current ones (default: lucidd's "
                        "defaults; the flags below override it)")
    t.add_argument("--min-gain", type=float, default=0.01,
                   help="share by which a new value must lower the average JCT to be proposed (default 0.01 = 1%%)")
    t.add_argument("--tail-slack", type=float, default=0.0,
                   help="allowed relative excess of p99.9/avg queue over the reference (default 0.0; e.g. 0.05 = 5%%)")
    t.add_argument("--workers", type=int, help="parallel replays (default: up to 4 CPUs; >= 1)")
    t.add_argument("--jitter-seeds", type=int, default=0,
                   help="also replay N copies of the window with every submission moved by up to "
                        "+-JITTER_S s, and judge each value on the mean (default 0; >= 0)")
    t.add_argument("--jitter-s", type=int, default=60, help="the move's bound in seconds (default 60; >= 1)")
    t.add_argument("--scale-nodes", type=float, metavar="F", help="as for simulate: every VC's node count x F")
    t.add_argument("--skip-bad-rows", action="store_true", help="as for simulate: drop malformed trace rows")
    t.add_argument("--out", default="tune-out", help="where proposal.json and tuning_points.csv go (default ./tune-out)")
    for flag in ("--colocation", "--profiles"):
        t.add_argument(flag, help="as for simulate")
    for flag in ("--tprof", "--cprof", "--nprof", "--gss", "--starvation-s", "--aging-halflife-s"):
        t.add_argument(flag, type=int, help="current value (default: lucidd's default)")

    # Not for import-sacct: there `--json` has long been short for its `--json-file`.
    sub.add_parser = _add_parser
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
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.command == "explain" and args.what != "job":
        parser.exit(2, f"lucidctl: error: explain {args.what}: only jobs can be explained so far: "
                       "`lucidctl explain job ID` (see `lucidctl explain --help`)\n")
    if args.command is None:
        _parser().print_help()
        return 2
    from models.base import ModelError

    try:
        if args.command == "simulate":
            return cmd_simulate(args)
        if args.command == "tune":
            return cmd_tune(args)
        if args.command in ("status", "queue", "models", "actions") or (args.command == "explain" and not args.sim_out):
            from .admin_cli import cmd_live

            return cmd_live(args)
        if args.command == "explain" and args.sim_out:
            from .explain_cli import explain_sim_job

            return explain_sim_job(args)
        if args.command == "import-sacct":
            from .sacct_import import cmd_import_sacct

            return cmd_import_sacct(args)
        raise LucidError(f"'{args.command}' needs a running lucidd daemon (lucidd --config FILE); see docs/deploy.md. "
                         "For a simulated job: `lucidctl explain job ID --sim-out DIR`")
    except (LucidError, ModelError) as exc:
        print(f"lucidctl: error: {_cli_words(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lucidctl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lucidctl ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a full disk or quota, a file that went away: the system's, said in one line
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"lucidctl: error: {where}{exc.strerror or exc} (a file could not be read or written; "
              "what was written is incomplete)", file=sys.stderr)
        return 2


def _input_paths(args) -> list:
    """The files a run reads, which its --out must never remove."""
    return [getattr(args, k, None) for k in ("trace", "vc_config", "estimates", "colocation", "profiles")
            if getattr(args, k, None) not in (None, "sample")]


def _cli_words(message: str) -> str:
    """An error from the Python API, in the CLI's words (flags, not keyword arguments), on one line."""
    from .traces import SKIP_HINT_API, SKIP_HINT_CLI

    return " ".join(message.replace(SKIP_HINT_API, SKIP_HINT_CLI).split())


# ----- argument checks: all before any trace is read or any replay starts -----------------------

def _check_int(args, name: str, lo: int | None = None, hi: int | None = None, what: str = "") -> None:
    v = getattr(args, name, None)
    if v is None:
        return
    flag = "--" + name.replace("_", "-")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        if hi is None:
            rng = f"at least {lo}"
        elif lo is None:
            rng = f"at most {hi}"
        else:
            rng = f"from {lo} to {hi}"
        raise ConfigError(f"{flag} {v}: must be {rng}{what}")


def _missing_file(path, flag: str) -> str | None:
    """Why `path`, given by `flag`, is not a file lucidctl can read, or None."""
    if os.path.isfile(path):
        return None
    if os.path.isdir(path):
        return f"{flag} {path}: is a directory, not a CSV file"
    if os.path.exists(path):  # a pipe (`<(zcat ...)`, /dev/stdin) or a device: read more than once
        return f"{flag} {path}: is a pipe or a device, not a file (lucidctl reads it more than once): save it to a file"
    return f"{flag} {path}: file not found"


def _check_table(path, flag: str, layouts: list[tuple[str, tuple]]) -> None:
    """A CSV file given by a flag exists and its header has the columns of one of `layouts`."""
    import pandas as pd

    if (why := _missing_file(path, flag)) is not None:
        raise ConfigError(why)
    try:
        cols = {str(c).strip() for c in pd.read_csv(path, nrows=0).columns}
    except Exception as exc:  # noqa: BLE001 -- any unreadable or non-CSV file
        raise ConfigError(f"{flag} {path}: cannot read it as CSV ({' '.join(str(exc).split()) or type(exc).__name__})") \
            from None
    best = None
    for name, needed in layouts:
        missing = [c for c in needed if c not in cols]
        if not missing:
            return
        if best is None or len(missing) < len(best[1]):
            best = (name, missing)
    name, missing = best
    raise ConfigError(f"{flag} {path}: column '{missing[0]}' is missing"
                      + (f" (and {', '.join(missing[1:])})" if len(missing) > 1 else "")
                      + f" for the {name} layout (docs/models-packing-throughput.md)")


def _check_args(args) -> None:
    """Range and consistency checks of every flag: one line naming the flag, before any work."""
    from .cluster import MAX_NODES
    from .experiment import known_policies

    _check_int(args, "nodes", lo=1, hi=MAX_NODES, what=" (nodes in the one VC)")
    _check_int(args, "gpus_per_node", lo=1, hi=64)
    _check_int(args, "tprof", lo=1, what=" second(s)")
    _check_int(args, "cprof", lo=0, what=" (0: no profiling partition)")
    _check_int(args, "nprof", lo=1, what=" GPU(s)")
    _check_int(args, "gss", lo=0, hi=4, what=" (sharing scores are 0-2, so a pair sums to 0-4)")
    _check_int(args, "starvation_s", lo=1, what=" second(s)")
    _check_int(args, "aging_halflife_s", lo=0, what=" second(s) (0: no aging)")
    _check_int(args, "starving_halflife_s", lo=0, hi=10 ** 7, what=" second(s) (0: oldest first)")
    _check_int(args, "long_tprof_s", lo=0, hi=7 * 86400, what=" second(s) (0: Tprof for every run)")
    _check_int(args, "bf_window", lo=1, hi=43200, what=" minute(s) (Slurm's own range)")
    _check_int(args, "workers", lo=1)
    _check_int(args, "jitter_seeds", lo=0, hi=100, what=" (jittered copies of the window)")
    _check_int(args, "jitter_s", lo=1, hi=86400, what=" second(s)")
    if getattr(args, "scale_nodes", None) is not None:
        from .cluster import check_scale_factor

        check_scale_factor(args.scale_nodes)
    if getattr(args, "limit_rule", None) is not None:
        from .policies.slurm_backfill import parse_limit_rule

        parse_limit_rule(args.limit_rule)
    if args.nodes is not None and args.vc_config:
        raise ConfigError(f"--nodes {args.nodes} and --vc-config {args.vc_config}: give one of them "
                          "(--nodes makes one VC of that many nodes, --vc-config lists the VCs)")
    gain = getattr(args, "min_gain", None)
    if gain is not None and not (math.isfinite(gain) and 0 <= gain < 1):
        raise ConfigError(f"--min-gain {gain}: must be from 0 to below 1 (a fraction: 0.01 asks a change for 1 % "
                          "lower average JCT)")
    slack = getattr(args, "tail_slack", None)
    if slack is not None and not (math.isfinite(slack) and 0 <= slack <= 10):
        raise ConfigError(f"--tail-slack {slack}: must be from 0 to 10 (a fraction: 0.05 allows 5 % more "
                          "p99.9 and average queueing than the reference)")
    known = known_policies()
    reference = getattr(args, "reference", None)
    if reference is not None and reference not in known:
        raise ConfigError(f"--reference {reference}: unknown policy; known: {', '.join(known)}")
    if args.trace != "sample" and not os.path.isdir(args.trace) and (why := _missing_file(args.trace, "--trace")):
        raise ConfigError(why)
    if getattr(args, "estimates", None) and (why := _missing_file(args.estimates, "--estimates")):
        raise ConfigError(why)
    if getattr(args, "config", None):  # read whole before any replay: a bad key fails here, not after the trace
        _load_lucidd_config(args.config)
    if args.vc_config and (why := _missing_file(args.vc_config, "--vc-config")):
        raise ConfigError(why)
    if args.colocation:
        from models.packing import WORKLOAD_KEY

        _check_table(args.colocation, "--colocation", [
            ("pair", tuple(f"{c}{i}" for i in (1, 2) for c in (*WORKLOAD_KEY, "speed"))),
            ("long", (*WORKLOAD_KEY, "coloc_speed"))])
    if args.profiles:
        from models.packing import FEATURES, WORKLOAD_KEY

        _check_table(args.profiles, "--profiles",
                     [("profile", tuple(dict.fromkeys((*WORKLOAD_KEY, *FEATURES))))])


def _check_cluster_args(args, exp) -> None:
    """Checks that need the cluster (built from the trace in a second or two, before any replay).

    `--cprof`/`--nprof` size lucid-standalone's dedicated profiling nodes; `lucid` (lucidd on
    Slurm) profiles in a partition over every node, where Nprof is checked as lucidd checks
    `[profiler] nprof_gpus`, so these checks apply only when lucid-standalone runs."""
    from orchestrator.simulation import option_defaults
    from profiler.lgf import carve_profiling_nodes

    if hasattr(args, "variant"):  # tune: the Lucid tuned, or the reference it is judged against
        standalone = args.variant.startswith("lucid-standalone") or args.reference.startswith("lucid-standalone")
    else:
        given = getattr(args, "policies", None)
        standalone = given is not None and any(p.strip().startswith("lucid-standalone") for p in given.split(","))
    if not standalone:
        return
    defaults = option_defaults(exp.spec)
    cprof = defaults["cprof"] if args.cprof is None else args.cprof
    nprof = int(exp.options.get("nprof") or defaults["nprof"])  # a flag, a --config, or the default
    given = "" if args.cprof is not None else " (the default for this cluster)"
    if cprof > 0:
        try:
            carve_profiling_nodes(exp.spec, cprof, exp.trace)
        except ValueError:
            if args.cprof is not None:
                raise ConfigError(f"--cprof {cprof}: the cluster ({exp.spec.total_nodes} nodes in {len(exp.spec.vcs)} "
                                  f"VCs) cannot give {cprof} profiling node(s) without leaving a VC too small for its "
                                  "largest job; give fewer (0: no profiler)") from None
        gpus = cprof * next(iter(exp.spec.vcs.values())).gpus_per_node
        if nprof > gpus and args.nprof is None:
            # the default (8) on smaller nodes, or a lucidd.toml's value: the most the nodes hold
            # (for lucid-standalone only; `lucid` keeps lucidd's own value)
            exp.options["standalone_nprof_cap"] = gpus
        elif nprof > gpus:
            raise ConfigError(f"--nprof {nprof}: larger than lucid-standalone's profiling nodes' {gpus} GPUs "
                              f"(--cprof {cprof}{given}); give --nprof {gpus} or less, or a larger --cprof")


def _trace_words(given: str, path: str) -> str:
    """The trace as a plot title names it: its folder and file (Venus' file is plain jobs.csv)."""
    if given == "sample":
        return "bundled sample trace"
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return f"{parent}/{os.path.basename(path)}" if parent else os.path.basename(path)


def _cluster_words(spec) -> str:
    return f"{len(spec.vcs)} VC{'s' if len(spec.vcs) != 1 else ''}, {spec.total_nodes} nodes, {spec.total_gpus} GPUs"


def _experiment_from_args(args, what: str):
    """The trace window, its cluster and Lucid's options as `simulate` and `tune` both take them.
    Jobs before `--start` are loaded as training history for the models (unless --no-prior)."""
    from .experiment import make_experiment
    from .traces import load_trace, sample_trace_path, sample_vc_config_path

    trace_path, vc_config = args.trace, args.vc_config
    if trace_path == "sample":
        trace_path = sample_trace_path()
        if args.nodes is None:  # --nodes replaces the sample's own VCs
            vc_config = vc_config or sample_vc_config_path()
    skip_bad = getattr(args, "skip_bad_rows", False)
    loaded = load_trace(trace_path, args.format, start=args.start, end=args.end, skip_bad_rows=skip_bad)
    if len(loaded.jobs) == 0:
        raise LucidError(f"{loaded.path}: no jobs left to {what} ({loaded.report()})")
    prior = None
    if args.start is not None and not getattr(args, "no_prior", False):
        try:
            prior = load_trace(trace_path, args.format, end=args.start, skip_bad_rows=True)
        except EmptyWindowError:
            prior = None  # nothing was submitted before --start: no history to learn from
    exp = make_experiment(loaded, vc_config=vc_config, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          estimates_path=getattr(args, "estimates", None), prior=prior,
                          scale_nodes=getattr(args, "scale_nodes", None))
    if getattr(args, "config", None):  # a lucidd.toml: its values first, then the flags given
        pols = getattr(args, "policies", None)
        lucid_runs = pols is None or any(p.strip().startswith("lucid") for p in pols.split(","))
        exp.options.update(_options_of_lucidd_config(args.config, exp, lucid_runs))
    exp.options.update({k: getattr(args, k) for k in ("colocation", "profiles", "tprof", "cprof", "nprof", "gss",
                                                       "starvation_s", "aging_halflife_s", "starving_halflife_s")
                        if getattr(args, k, None) is not None})
    exp.options["limit_rule"] = getattr(args, "limit_rule", None)  # the slurm baseline's time limits
    if getattr(args, "bf_window", None) is not None:  # Slurm's engine, for slurm and lucid alike
        exp.options["bf_window_s"] = args.bf_window * 60
    if getattr(args, "long_tprof_s", None) is not None:  # lucidd's [profiler] keys, for `lucid`
        exp.options["prof_long_tprof"] = args.long_tprof_s
    if getattr(args, "no_lend", False):
        exp.options["prof_lend"] = 0
    _check_cluster_args(args, exp)
    return loaded, exp


def _options_of_lucidd_config(path: str, exp, lucid_runs: bool = True) -> dict:
    """The replay options of a lucidd config file (its [profiler] and [ordering] keys, [daemon]
    interval_s), checked as lucidd checks them. lucid-standalone has four knobs of the same names
    (Tprof, Nprof, the starvation guard, aging) and reads them too."""
    from orchestrator.slurm_mode import LIVE_OPTIONS, options_from_config

    cfg, raw = _load_lucidd_config(path)
    # only the keys the file sets: a missing one is lucidd's default, which `lucid` replays anyway,
    # and lucid-standalone keeps its own
    given = {(sec, key) for sec, keys in raw.items() if isinstance(keys, dict) for key in keys}
    opts = {opt: v for opt, v in options_from_config(cfg).items()
            if (opt in LIVE_OPTIONS and LIVE_OPTIONS[opt][:2] in given)
            or (opt == "profiling" and ("profiler", "enabled") in given)
            or (opt == "interval_s" and ("daemon", "interval_s") in given)
            or (opt == "packing" and v is not None)}
    if lucid_runs and cfg.packing.enabled:
        exp.notes.append(f"{path}: [packing] enabled: `lucid` lowers profiled 1-GPU jobs that pass lucidd's test "
                         "(the trace's gpu_util and gmem as their profiling runs' figures) and pairs them as Slurm's "
                         "first-fit would (docs/simulator.md); lucid-standalone packs by its own rules")
    interval = opts.get("interval_s")
    if interval is not None and (interval < 1 or interval != int(interval)):  # the replay's cycles: whole seconds
        opts["interval_s"] = float(max(1, round(interval)))
        exp.notes.append(f"{path}: [daemon] interval_s {interval:g} replayed as {opts['interval_s']:g} s "
                         "(the replay's cycles are whole seconds)")
    return _note_config(path, exp, lucid_runs, opts)


def _load_lucidd_config(path: str):
    """(Config, raw TOML dict) of `--config`, its errors naming the flag."""
    from .live.config import load_config_and_toml

    try:
        return load_config_and_toml(path)
    except ConfigError as exc:
        raise ConfigError(f"--config {exc}") from None


def _note_config(path: str, exp, lucid_runs: bool, opts: dict) -> dict:
    if lucid_runs:
        exp.notes.append(f"lucid replays the [profiler], [ordering] and interval_s of {path} (lucid-standalone "
                         "its tprof_s, nprof_gpus, starvation_s and aging_halflife_s)")
    else:
        exp.notes.append(f"{path}: no Lucid policy in this run, so its values are not used")
    return opts


def cmd_simulate(args) -> int:
    if getattr(args, "workload", "trace") == "dl2":
        from .elastic.cli import cmd_simulate_elastic

        return cmd_simulate_elastic(args)
    from .experiment import DEFAULT_POLICIES, known_policies, progress_bar, write_results
    from .metrics import format_table
    from .outdir import OutputDir

    known = known_policies()
    if args.policies is not None:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in policies if p not in known]
        if unknown:
            raise ConfigError(f"--policies: unknown policy {', '.join(unknown)}; known: {', '.join(known)}")
        if not policies:
            raise ConfigError(f"--policies {args.policies!r}: names no policy; known: {', '.join(known)}")
        twice = sorted({p for p in policies if policies.count(p) > 1})
        if twice:
            raise ConfigError(f"--policies: {', '.join(twice)} listed twice")
    else:
        policies = [p for p in known if p in DEFAULT_POLICIES or p == "lucid"]
    _check_args(args)
    out = OutputDir.prepare(args.out, "simulate", protect=_input_paths(args))
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
    out.clear()  # an earlier run's files: never mixed with this run's
    title = f"{_trace_words(args.trace, loaded.path)}: {len(exp.trace):,} jobs on {_cluster_words(exp.spec)}"
    summary = write_results(results, args.out, plots=not args.no_plots, title=title)
    if any(p.startswith("lucid") for p in policies):  # the models behind `lucidctl explain job ID --sim-out`
        from orchestrator.artifacts import save_models

        save_models(exp, args.out)
    manifest = out.finish({"trace": loaded.path, "format": loaded.fmt, "jobs": int(len(exp.trace)),
                           "cluster": exp.spec.describe(), "policies": policies,
                           "argv": getattr(args, "argv", None)})
    behind = _behind_slurm(exp, results, summary)
    if args.json:
        print(json.dumps({
            "trace": loaded.path, "format": loaded.fmt, "jobs": int(len(exp.trace)), "dropped": loaded.dropped,
            "cluster": {k: {"nodes": v.nodes, "gpus_per_node": v.gpus_per_node} for k, v in exp.spec.vcs.items()},
            "out": os.path.abspath(args.out), "summary": summary.to_dict("records"),
            "seconds": {k: round(v, 3) for k, v in timings.items()}, "notes": exp.notes,
            "behind_slurm": behind, "manifest": os.path.abspath(manifest),
        }, indent=2, default=str))
    else:
        from orchestrator.against_slurm import describe

        for note in exp.notes:
            print(f"note: {note}")
        print()
        print(format_table(summary.to_dict("records")))
        print()
        for entry in behind:
            print(f"note: {describe(entry)}")
        if behind:
            print()
        print("wrote summary.csv, jobs_<policy>.csv"
              + ("" if args.no_plots else ", jct_cdf.png, timeline.png")
              + (", models/" if any(p.startswith("lucid") for p in policies) else "")
              + f" and manifest.json to {args.out}/")
    return 0


def _behind_slurm(exp, results, summary) -> list[dict]:
    """Where a Lucid-on-Slurm replay of this run is behind `slurm`'s, with the causes the replay
    shows (orchestrator.against_slurm); empty unless both ran."""
    from orchestrator.against_slurm import ON_SLURM, behind_slurm

    names = {r.policy for r in results}
    if "slurm" not in names or not names & set(ON_SLURM):
        return []
    from orchestrator.slurm_mode import live_config

    from .metrics import offered_load

    interval_s = live_config({"interval_s": exp.options.get("interval_s")}).daemon.interval_s
    profiler = {r.policy: r.extra.get("profiler") for r in results}
    return behind_slurm(summary.to_dict("records"), profiler, offered_load(exp.trace, exp.spec.total_gpus),
                        exp.spec.total_gpus, interval_s)


def cmd_tune(args) -> int:
    from orchestrator.tuner import Tuner, format_proposal, write_proposal

    from .outdir import OutputDir

    _check_args(args)
    out = OutputDir.prepare(args.out, "tune", protect=_input_paths(args))
    loaded, exp = _experiment_from_args(args, "replay")
    if not args.json:
        print(f"replaying {loaded.report()}")
        print(f"cluster: {exp.spec.describe()}")
        for note in exp.notes:
            print(f"note: {note}")
        print(flush=True)
    log = (lambda msg: None) if args.json else (lambda msg: print(msg, file=sys.stderr))
    proposal = Tuner(exp, reference_policy=args.reference, variant=args.variant, tail_slack=args.tail_slack,
                     workers=args.workers, log=log, jitter_seeds=args.jitter_seeds, jitter_s=args.jitter_s,
                     min_gain=args.min_gain).run()
    proposal.context = {"trace": loaded.path, "format": loaded.fmt, "jobs": int(len(exp.trace)),
                        "window": {"start": args.start, "end": args.end}, "cluster": exp.spec.describe(),
                        "notes": list(exp.notes)}
    out.clear()
    d = write_proposal(proposal, args.out)
    out.finish({"trace": loaded.path, "format": loaded.fmt, "jobs": int(len(exp.trace)),
                "cluster": exp.spec.describe(), "argv": getattr(args, "argv", None)})
    if args.json:
        print(json.dumps(d, indent=2, default=float))
    else:
        print(format_proposal(proposal))
        print(f"wrote proposal.json, tuning_points.csv and manifest.json to {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
