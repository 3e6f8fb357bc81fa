"""jobs_<policy>.csv is an interface scripts read: its header must not depend on what happened in
the run (before 3 December 2026 `profiler_node` appeared only when some job was profiled, and
`packed_with` only when some job was packed)."""

from __future__ import annotations

from lucidd.experiment import make_experiment
from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

ON_SLURM_EXTRA = ["decision", "packed_with", "profile_reason", "profiled", "profiler_end", "profiler_finished",
                  "profiler_node", "profiler_start", "share_score", "site_factor", "submitted"]
STANDALONE_EXTRA = ["decision", "packed_with", "profiled", "profiler_end", "profiler_finished", "profiler_start",
                    "share_score"]


def _extra(res):
    base = list(res.jobs.columns).index("jct_s")
    return list(res.jobs.columns)[base + 1:]


def test_every_lucid_replay_writes_the_same_columns_whatever_ran():
    exp = make_experiment(load_trace(sample_trace_path(), start=2 * 86400, end=2 * 86400 + 6 * 3600),
                          vc_config=sample_vc_config_path())
    for policy in ("lucid", "lucid-noprofiler", "lucid-oracle"):
        res = exp.run(policy)
        assert _extra(res) == ON_SLURM_EXTRA, (policy, _extra(res))
    res = exp.run("lucid-noprofiler")
    assert res.jobs["profiler_node"].isna().all() and not res.jobs["profiled"].any()
    for policy in ("lucid-standalone", "lucid-standalone-noprofiler"):
        res = exp.run(policy)
        assert _extra(res) == STANDALONE_EXTRA, (policy, _extra(res))
