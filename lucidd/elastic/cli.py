"""`lucidctl simulate --workload dl2`: the elastic mode from the command line (docs/elastic.md)."""

from __future__ import annotations

import json
import os
import time

from ..errors import ConfigError

DEFAULT_ELASTIC_POLICIES = ("drf", "fifo", "srtf", "tetris", "optimus-oracle", "optimus")


def add_simulate_arguments(s) -> None:
    g = s.add_argument_group("elastic mode: DL2's workload in time slots (docs/elastic.md)")
    g.add_argument("--workload", choices=["trace", "dl2"], default="trace",
                   help="'dl2': generate DL2's workload and simulate elastic (PS/worker) schedulers slot by slot "
                        "instead of replaying --trace (default: trace)")
    g.add_argument("--dl2-data", metavar="DIR", help="DL2's config_speed.txt and workload.json (default: "
                                                     "$LUCIDD_DL2_DATA or ../shared/dl2)")
    g.add_argument("--seed", type=int, help="--workload dl2: the trace's seed (default 9973, DL2's)")
    g.add_argument("--jobs", type=int, help="--workload dl2: jobs in the trace (default 60)")
    g.add_argument("--arrivals", choices=["google", "poisson", "uniform"],
                   help="--workload dl2: arrival pattern (default google: DL2's Google-trace counts)")
    g.add_argument("--dl2-model", metavar="FILE", help="--workload dl2: a trained DL2 policy, for --policies dl2")


def _check(args) -> list[str]:
    from .experiment import elastic_policy_names

    if args.trace != "sample" or args.vc_config or args.start or args.end or args.estimates:
        raise ConfigError("--workload dl2 generates its own jobs: it takes none of --trace, --vc-config, --start, "
                          "--end, --estimates")
    known = elastic_policy_names()
    if args.policies is None:
        policies = list(DEFAULT_ELASTIC_POLICIES) + (["dl2"] if args.dl2_model else [])
    else:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in policies if p not in known]
        if unknown or not policies:
            raise ConfigError(f"--policies: unknown policy {', '.join(unknown) or repr(args.policies)} for --workload "
                              f"dl2; known: {', '.join(known)}")
        twice = sorted({p for p in policies if policies.count(p) > 1})
        if twice:
            raise ConfigError(f"--policies: {', '.join(twice)} listed twice")
    if "dl2" in policies and not args.dl2_model:
        raise ConfigError("--policies dl2 needs --dl2-model FILE (a trained policy: docs/elastic.md)")
    if args.dl2_model and not os.path.isfile(args.dl2_model):
        raise ConfigError(f"--dl2-model {args.dl2_model}: file not found")
    for name, lo in (("nodes", 1), ("jobs", 1)):
        v = getattr(args, name)
        if v is not None and v < lo:
            raise ConfigError(f"--{name} {v}: must be at least {lo}")
    return policies


def cmd_simulate_elastic(args) -> int:
    from ..experiment import progress_bar, write_results
    from ..metrics import format_table
    from ..outdir import OutputDir
    from .experiment import make_elastic_experiment

    policies = _check(args)
    out = OutputDir.prepare(args.out, "simulate")
    exp = make_elastic_experiment(args.dl2_data, nodes=args.nodes or 96, num_jobs=args.jobs or 60,
                                  arrivals=args.arrivals or "google", seed=9973 if args.seed is None else args.seed,
                                  dl2_model=args.dl2_model)
    what = (f"dl2 workload: {exp.workload.num_jobs} jobs, {exp.workload.arrivals} arrivals (peak "
            f"{exp.workload.max_arrivals}/slot), seed {exp.seed}")
    if not args.json:
        print(what)
        print(f"cluster: {exp.cluster.describe()}")
    results, timings = [], {}
    for name in policies:
        t0 = time.perf_counter()
        with progress_bar(len(exp.traces[0]), name, enabled=not args.no_progress):
            results.append(exp.result(name))
        timings[name] = time.perf_counter() - t0
    out.clear()
    title = f"{what} on {exp.cluster.nodes} nodes ({exp.cluster.total_gpus} GPUs)"
    summary = write_results(results, args.out, plots=not args.no_plots, title=title)
    manifest = out.finish({"workload": "dl2", "seed": exp.seed, "jobs": exp.workload.num_jobs,
                           "cluster": exp.cluster.describe(), "policies": policies, "argv": getattr(args, "argv", None)})
    if args.json:
        print(json.dumps({"workload": "dl2", "seed": exp.seed, "jobs": exp.workload.num_jobs,
                          "cluster": exp.cluster.describe(), "out": os.path.abspath(args.out),
                          "summary": summary.to_dict("records"), "seconds": {k: round(v, 3) for k, v in timings.items()},
                          "manifest": os.path.abspath(manifest)}, indent=2, default=str))
    else:
        print()
        print(format_table(summary.to_dict("records")))
        print()
        print("wrote summary.csv, jobs_<policy>.csv" + ("" if args.no_plots else ", jct_cdf.png, timeline.png")
              + f" and manifest.json to {args.out}/")
    return 0
