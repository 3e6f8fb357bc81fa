"""`lucidctl import-sacct`: a cluster's own `sacct --json` history as a trace for `simulate`.

The fixtures under tests/core/data/ are real output of the Slurm 22.05.8 test cluster
(scripts/testcluster.sh, slurmdbd) captured read-only:

* `sacct_2205_duplicates.json`: `sacct --json --allusers --duplicates --starttime 2026-01-01`
* `sacct_2205.json`: the same without `--duplicates` (22.05's JSON lists every run either way)
* `sacct_2205_lucidd.json`: the first command again a few minutes later, after the real-Slurm
  tier had run lucidd on the cluster: 41 records, lucidd's own profiling requeues (jobs 14 and
  22 from `profiling` to `main` with no partition asked, 15 and 23 to `research` with
  `lucid:partition=research`), jobs that finished within Tprof in `profiling` (11-13, 19-21) and
  `--exclusive` jobs that asked for 1-4 GPUs and were allocated the node's 8 (27-36)
* `sinfo_2205.json`: `sinfo --json` (4 nodes of 8 GPUs; partitions inbox, profiling, main on
  gpu[1-4], research on gpu[3-4])

They hold 11 records: jobs 1-3 cancelled while pending in `inbox` (job 1 named with a double quote
and a non-ASCII mark), jobs 4-7 (1, 2, 4, 8 GPUs) submitted to `profiling` directly, job 8 (16
GPUs, 2 nodes) and 10 in `main`, and job 9 requeued from `profiling` to `research` (two records).
Tests that need a case the cluster did not produce (an array, a reused id, ...) derive it from
one of these real records and say so.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from lucidd.cli import main
from lucidd.sacct_import import (TRACE_COLUMNS, SacctImportError, _iso, parse_when, read_json_file,
                                 sacct_json_to_trace, vc_config_from_sinfo)
from lucidd.traces import load_trace

DATA = Path(__file__).parent / "data"
SACCT = DATA / "sacct_2205_duplicates.json"
SACCT_NO_D = DATA / "sacct_2205.json"
SACCT_LUCIDD = DATA / "sacct_2205_lucidd.json"
SINFO = DATA / "sinfo_2205.json"

FIRST_SUBMIT_9 = 1795457385  # job 9's first record (profiling); its second record says 1795457407


def _data():
    return json.loads(SACCT.read_text())


def _rec(data, job_id, partition=None):
    return next(r for r in data["jobs"] if r["job_id"] == job_id and (partition is None or r["partition"] == partition))


def _only(data, *recs):
    d = copy.deepcopy(data)
    d["jobs"] = [copy.deepcopy(r) for r in recs]
    return d


# ----- the real output ------------------------------------------------------------------------

def test_real_sacct_output_becomes_a_trace():
    df, rep = sacct_json_to_trace(_data(), source="sacct.json")
    assert list(df.columns) == list(TRACE_COLUMNS)
    assert rep.records == 11
    assert list(df["job_id"]) == ["4", "5", "6", "7", "8", "9", "10"]
    assert rep.dropped == {"never started": 3}  # jobs 1-3, cancelled in the inbox
    by = df.set_index("job_id")
    assert by.loc["8", "gpu_num"] == 16 and by.loc["8", "cpu_num"] == 2 and by.loc["8", "vc"] == "main"
    assert list(by.loc[["4", "5", "6", "7"], "gpu_num"]) == [1, 2, 4, 8]
    assert by.loc["10", "duration"] == 30 and by.loc["10", "state"] == "COMPLETED"
    assert (df["user"] == "root").all() and by.loc["9", "name"] == "long"
    assert df["submit_time"].str.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$").all()
    # requeued from profiling to research: one job, first submit, last run, last run's partition
    assert rep.requeued == 1 and rep.extra_runs == 1
    assert by.loc["9", "submit_time"] == pd.Timestamp(FIRST_SUBMIT_9, unit="s").strftime("%Y-%m-%dT%H:%M:%SZ")
    assert by.loc["9", "duration"] == 60  # the research run; the 20 s profiling run is not counted
    assert by.loc["9", "vc"] == "research" and by.loc["9", "requeues"] == 1
    # submitted straight to profiling, no lucid:partition= note: kept, and reported
    assert rep.vc_lucid_left == {"profiling": 4}
    assert any("--default-vc" in line for line in rep.lines())


def test_22_05_json_lists_every_run_with_or_without_duplicates():
    assert json.loads(SACCT_NO_D.read_text())["jobs"] == _data()["jobs"]


def test_real_lucidd_profiling_requeues():
    data = json.loads(SACCT_LUCIDD.read_text())
    df, rep = sacct_json_to_trace(data)
    assert rep.records == 41 and rep.dropped == {"never started": 3} and len(df) == 33
    assert rep.requeued == 5 and rep.extra_runs == 5
    by = df.set_index("job_id")
    for jid, vc in (("14", "main"), ("22", "main"), ("15", "research"), ("23", "research"), ("9", "research")):
        assert by.loc[jid, "vc"] == vc and by.loc[jid, "requeues"] == 1, jid
    first = {r["job_id"]: r["time"]["submission"] for r in data["jobs"] if r["state"]["current"] == "REQUEUED"}
    for jid in ("14", "15", "22", "23"):  # submit of the profiling run; duration of the run after it
        assert by.loc[jid, "submit_time"] == pd.Timestamp(first[int(jid)], unit="s").strftime("%Y-%m-%dT%H:%M:%SZ")
        assert by.loc[jid, "duration"] == 20
    # finished within Tprof, no partition asked: lucidd would have sent them to its default partition
    assert rep.vc_lucid_left == {"profiling": 10}
    df2, rep2 = sacct_json_to_trace(data, default_vc="main")
    assert set(df2["vc"]) == {"main", "research"} and rep2.vc_default == 10 and not rep2.vc_lucid_left
    # --exclusive: 1 GPU asked, the node's 8 allocated; the allocation is what the job held
    assert by.loc["29", "gpu_num"] == 8 and by.loc["29", "name"] == "o1"


def test_imported_trace_loads_with_load_trace(tmp_path):
    df, _ = sacct_json_to_trace(_data())
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    t = load_trace(path)
    assert t.fmt == "csv" and len(t.jobs) == 7 and t.dropped == {}
    assert t.origin == pd.Timestamp("2026-11-23", tz="UTC")
    j = t.jobs.set_index("job_id")
    assert j.loc["9", "submit_time"] == FIRST_SUBMIT_9 - int(pd.Timestamp("2026-11-23", tz="UTC").timestamp())
    assert j.loc["9", "duration"] == 60 and j.loc["8", "gpu_num"] == 16 and j.loc["9", "vc"] == "research"
    assert t.missing_inputs == ["workload"]


def test_vc_config_from_real_sinfo():
    df, _ = sacct_json_to_trace(_data())
    cfg, notes = vc_config_from_sinfo(json.loads(SINFO.read_text()), df)
    assert cfg.to_dict("records") == [{"vc": "main", "nodes": 4, "gpus_per_node": 8},
                                      {"vc": "profiling", "nodes": 4, "gpus_per_node": 8},
                                      {"vc": "research", "nodes": 2, "gpus_per_node": 8}]
    assert any("more than one of these partitions" in n and "10 nodes for 4" in n for n in notes)


def test_a_partition_sinfo_no_longer_lists_is_sized_from_the_trace():
    """A retired or mistyped partition in the history (`-p mian`, which ran in the open inbox):
    --vc-config-out died with a TypeError (ISO submit times in the sizing) in an admin trial."""
    data = _data()
    for rec in data["jobs"]:
        if rec.get("partition") == "research":
            rec["partition"] = "oldvc"
    df, _ = sacct_json_to_trace(data)
    assert "oldvc" in set(df["vc"])
    cfg, notes = vc_config_from_sinfo(json.loads(SINFO.read_text()), df)
    row = cfg[cfg["vc"] == "oldvc"].iloc[0]
    assert row["nodes"] >= 1 and row["gpus_per_node"] == 8
    assert any("VC oldvc: no partition" in n for n in notes)


def test_cli_import_then_simulate(tmp_path, capsys):
    trace, vcs = tmp_path / "trace.csv", tmp_path / "vcs.csv"
    rc = main(["import-sacct", "--json-file", str(SACCT), "--sinfo-json", str(SINFO), "--out", str(trace),
               "--vc-config-out", str(vcs)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "7 jobs from 11 sacct records" in out and "3 never started" in out and "1 requeued job" in out
    assert f"wrote 7 jobs to {trace} and 3 VCs to {vcs}" in out
    for extra in ([], ["--vc-config", str(vcs)]):
        sim = tmp_path / f"sim{len(extra)}"
        rc = main(["simulate", "--trace", str(trace), "--format", "csv", "--policies", "fifo,sjf", "--no-plots",
                   "--no-progress", "--out", str(sim), *extra])
        assert rc == 0, capsys.readouterr()
        s = pd.read_csv(sim / "summary.csv")
        assert list(s["policy"]) == ["fifo", "sjf"] and (s["jobs"] == 7).all()
    capsys.readouterr()


def test_cli_json_report(tmp_path, capsys):
    assert main(["--json", "import-sacct", "--json-file", str(SACCT), "--out", str(tmp_path / "t.csv")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["jobs"] == 7 and d["dropped"] == {"never started": 3} and d["requeued"] == 1
    assert d["vcs"] == {"main": 2, "profiling": 4, "research": 1} and d["vc_config"] is None


# ----- rules, on records derived from the real ones ----------------------------------------------

def test_lucidd_partitions_map_back_to_the_asked_partition():
    data = _data()
    asked = copy.deepcopy(_rec(data, 4))  # ended in profiling within Tprof; asked for research
    asked["comment"]["administrator"] = "other note lucid:partition=research,main"
    plain = _rec(data, 5)
    df, rep = sacct_json_to_trace(_only(data, asked, plain))
    assert dict(zip(df["job_id"], df["vc"])) == {"4": "research", "5": "profiling"}
    assert rep.vc_from_request == 1 and rep.vc_lucid_left == {"profiling": 1}
    df, rep = sacct_json_to_trace(_only(data, asked, plain), default_vc="main")
    assert dict(zip(df["job_id"], df["vc"])) == {"4": "research", "5": "main"} and rep.vc_default == 1
    df, _ = sacct_json_to_trace(_only(data, asked, plain), lucid_partitions=["inbox"])
    assert set(df["vc"]) == {"profiling"}  # not lucidd's partition on this cluster: a VC like any other


def test_requeued_job_cancelled_before_its_second_run():
    data = _data()
    first, second = copy.deepcopy(_rec(data, 9, "profiling")), copy.deepcopy(_rec(data, 9, "research"))
    second["time"]["start"], second["state"]["current"], second["tres"]["allocated"] = None, "CANCELLED", []
    df, rep = sacct_json_to_trace(_only(data, second, first))
    (row,) = df.to_dict("records")
    assert row["duration"] == 20 and row["state"] == "CANCELLED" and row["vc"] == "research"  # lucid:partition=
    assert row["gpu_num"] == 1 and rep.requeued == 1


def test_requeued_job_cancelled_before_its_second_run_with_slurms_start_equal_to_end():
    """What Slurm 22.05 records for a run cancelled while pending: start = end, not no start (the
    admin trial's job 81, cancelled 0.7 s after its requeue, was written as a 0 s job)."""
    data = _data()
    first, second = copy.deepcopy(_rec(data, 9, "profiling")), copy.deepcopy(_rec(data, 9, "research"))
    second["time"]["start"] = second["time"]["end"]
    second["state"]["current"], second["tres"]["allocated"], second["nodes"] = "CANCELLED", [], "None assigned"
    df, rep = sacct_json_to_trace(_only(data, second, first))
    (row,) = df.to_dict("records")
    assert row["duration"] == 20 and row["state"] == "CANCELLED" and rep.requeued == 1
    # cancelled in its first second on a node: it did run, for 0 s
    second["nodes"] = "gpu1"
    df, _ = sacct_json_to_trace(_only(data, second, first))
    assert df.to_dict("records")[0]["duration"] == 0


def test_a_submission_slurm_refused_never_ran():
    """`sbatch -p research --gres=gpu:20` refused at submission ("Requested node configuration is
    not available") still reaches slurmdbd: FAILED, start = end, no nodes. It was imported as a
    0 s, 20-GPU job (an admin trial)."""
    data = _data()
    refused, other = copy.deepcopy(_rec(data, 10)), _rec(data, 4)
    refused["time"]["start"] = refused["time"]["end"]
    refused["state"]["current"], refused["tres"]["allocated"], refused["nodes"] = "FAILED", [], "None assigned"
    df, rep = sacct_json_to_trace(_only(data, refused, other))
    assert list(df["job_id"]) == ["4"] and rep.dropped == {"never started": 1}


def test_requeued_job_still_waiting_is_not_finished():
    data = _data()
    second = copy.deepcopy(_rec(data, 9, "research"))
    second["time"].update(start=None, end=None)
    second["state"]["current"] = "PENDING"
    df, rep = sacct_json_to_trace(_only(data, _rec(data, 9, "profiling"), second, _rec(data, 10)))
    assert list(df["job_id"]) == ["10"] and rep.dropped == {"not finished": 1}


def test_reused_job_id_is_two_jobs():
    data = _data()
    later = copy.deepcopy(_rec(data, 4))
    for k in ("submission", "eligible", "start", "end"):
        later["time"][k] += 86400
    df, rep = sacct_json_to_trace(_only(data, later, _rec(data, 4)))
    assert list(df["job_id"]) == ["4", "4#2"] and rep.ids_reused == 1 and rep.requeued == 0


def test_array_tasks_and_het_components_are_jobs():
    data = _data()
    tasks = []
    for i, raw in enumerate((10, 11, 12)):
        r = copy.deepcopy(_rec(data, 10))
        r["job_id"] = raw
        r["array"].update(job_id=10, task_id=i)
        tasks.append(r)
    het = copy.deepcopy(_rec(data, 8))
    het["job_id"], het["het"] = 20, {"job_id": 20, "job_offset": 0}
    df, _ = sacct_json_to_trace(_only(data, *tasks, het))
    assert sorted(df["job_id"]) == ["10_0", "10_1", "10_2", "20+0"]


def test_cpu_only_jobs_dropped_or_kept_as_one_gpu():
    data = _data()
    cpu = copy.deepcopy(_rec(data, 10))
    for key in ("allocated", "requested"):
        cpu["tres"][key] = [t for t in cpu["tres"][key] if t["type"] != "gres"]
    df, rep = sacct_json_to_trace(_only(data, cpu, _rec(data, 5)))
    assert list(df["job_id"]) == ["5"] and rep.dropped == {"cpu-only job": 1}
    df, rep = sacct_json_to_trace(_only(data, cpu, _rec(data, 5)), keep_cpu_jobs=True)
    by = df.set_index("job_id")
    assert by.loc["10", "gpu_num"] == 1 and by.loc["10", "gpus_recorded"] == 0 and rep.cpu_jobs_kept == 1
    df, rep = sacct_json_to_trace(_only(data, cpu))
    assert len(df) == 0 and "AccountingStorageTRES=gres/gpu" in rep.notes[0]


def test_gpus_from_requested_tres_when_none_allocated():
    data = _data()
    r = copy.deepcopy(_rec(data, 6))
    r["tres"]["allocated"] = [t for t in r["tres"]["allocated"] if t["type"] != "gres"]
    df, _ = sacct_json_to_trace(_only(data, r))
    assert df["gpu_num"].tolist() == [4]


def test_newer_slurm_value_shapes():
    """23.x writes numbers as {"set", "infinite", "number"} and the state as a list of flags."""
    data = _data()
    r = copy.deepcopy(_rec(data, 10))
    for k in ("submission", "start", "end"):
        r["time"][k] = {"set": True, "infinite": False, "number": r["time"][k]}
    r["state"]["current"] = ["COMPLETED"]
    r["array"]["task_id"] = {"set": False, "infinite": False, "number": 0}
    df, _ = sacct_json_to_trace(_only(data, r))
    assert df[["job_id", "duration", "state"]].values.tolist() == [["10", 30, "COMPLETED"]]


def test_slurmdbd_names_pass_through_unchanged(tmp_path):
    """Job 1's name as slurmdbd stored it (`"` became a backtick); it never ran, so give it a run."""
    data = _data()
    r = copy.deepcopy(_rec(data, 1))
    assert r["name"] == "x `dq` \u2713"
    r["time"]["start"], r["time"]["end"] = r["time"]["submission"] + 1, r["time"]["submission"] + 5
    r["tres"]["allocated"] = copy.deepcopy(_rec(data, 5)["tres"]["allocated"])
    r["name"] = 'x `dq` ? a,b\n"c"'  # plus what CSV must quote
    df, _ = sacct_json_to_trace(_only(data, r))
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    assert load_trace(path).jobs["name"].tolist() == [r["name"]]


def test_window_is_on_the_first_submit():
    data = _data()
    df, rep = sacct_json_to_trace(data, start=FIRST_SUBMIT_9, end=FIRST_SUBMIT_9 + 1)
    assert len(df) == 7 and rep.dropped == {"outside window": 3}  # jobs 1-3 were submitted earlier
    df, rep = sacct_json_to_trace(data, start=FIRST_SUBMIT_9 + 1)
    assert len(df) == 0 and rep.dropped == {"outside window": 10}  # 11 records, job 9's two are one job


def test_parse_when():
    assert parse_when("2026-11-23T18:09:45Z", "--start") == FIRST_SUBMIT_9
    assert parse_when("2026-11-23T19:09:45+01:00", "--start") == FIRST_SUBMIT_9
    with pytest.raises(SacctImportError, match="--end soon: not a date/time"):
        parse_when("soon", "--end")


# ----- errors: one line naming the file ------------------------------------------------------

@pytest.mark.parametrize("content,needle", [
    ("", "empty file"),
    ("  \n", "empty file"),
    ('{"jobs": [', "not valid JSON (line 1"),
    ("[1, 2]", "not `sacct --json` output (the JSON is a list"),
    ('{"meta": {}, "errors": []}', "no 'jobs' list; top-level keys: meta, errors"),
    ('{"jobs": [{"job_id": 1, "job_state": "RUNNING"}]}', "`squeue --json` output"),
    ('{"jobs": [{"job_id": 1}]}', "a job record without a 'time' object"),
    ('{"jobs": [], "errors": [{"error": "slurmdbd down"}]}', "sacct reported errors and no jobs"),
    ('{"jobs": []}', "no jobs to write (0 sacct records"),
    # Slurm 22.05's answer for an empty window (a new cluster): an empty history, not an error
    ('{"jobs": [], "errors": [{"description": "Nothing found", "error_number": 9003, '
     '"error": "Nothing found with query", "source": "slurmdb_jobs_get"}]}', "no jobs to write (0 sacct records"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["import-sacct", "--json-file", str(bad), "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lucidctl: error: {bad}: ") and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("argv,needle", [
    (["--json-file", str(SINFO)], "looks like `sinfo --json` output"),
    ([], "give one of --json-file FILE"),
    (["--json-file", str(SACCT), "--live"], "not allowed with argument"),
    (["--json-file", str(SACCT), "--vc-config-out", "v.csv"], "--vc-config-out needs --sinfo-json"),
    (["--json-file", str(SACCT), "--sinfo-json", str(SACCT), "--vc-config-out", "v.csv"],
     "not `sinfo --json` output (it looks like `sacct --json` output)"),
    (["--json-file", str(SACCT), "--start", "2026-12-01"], "no jobs to write"),
    (["--json-file", str(SACCT), "--start", "2026-12-01", "--end", "2026-11-30"], "must be after --start"),
    (["--json-file", "/nonexistent/x.json"], "/nonexistent/x.json: file not found"),
])
def test_bad_arguments(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    try:
        rc = main(["import-sacct", *argv, "--out", "t.csv"])
    except SystemExit as exc:  # argparse's own errors (same one-line contract)
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("lucidctl: error: ") and needle in err and err.count("\n") == 1, err


class _FakeRunner:
    """Stands in for SlurmRunner: --live must go through it (argv lists, never a shell)."""

    def __init__(self):
        self.calls = []

    def run_json(self, argv, object_hook=None):
        self.calls.append(argv)
        return json.loads((SACCT if argv[0] == "sacct" else SINFO).read_text(), object_hook=object_hook)


def test_live_goes_through_slurm_runner(tmp_path, capsys):
    from argparse import Namespace

    from lucidd.sacct_import import cmd_import_sacct

    runner = _FakeRunner()
    args = Namespace(json_file=None, live=True, start="2026-11-01T00:00:00Z", end="2026-12-01T00:00:00Z",
                     sinfo_json=None, out=str(tmp_path / "t.csv"), vc_config_out=str(tmp_path / "v.csv"),
                     keep_cpu_jobs=False, default_vc="main", lucid_partitions=None, json=False)
    assert cmd_import_sacct(args, runner=runner) == 0
    *windows, sinfo = runner.calls
    # a week, then twice as long after a window of few records (30 days: 7, 14, 9), each window
    # starting where the one before ended
    assert len(windows) == 3 and sinfo == ["sinfo", "--json"]
    for sacct in windows:
        assert sacct[:4] == ["sacct", "--json", "--allusers", "--duplicates"]
        assert sacct[4] == "--starttime" and sacct[6] == "--endtime"
    assert [w[7] for w in windows[:-1]] == [w[5] for w in windows[1:]]
    # every window listed the same jobs here: each is read once, and not reported as a duplicate record
    assert len(pd.read_csv(tmp_path / "t.csv")) == 7 and set(pd.read_csv(tmp_path / "v.csv")["vc"]) == {
        "main", "research"}
    out = capsys.readouterr().out
    assert "sacct --json --allusers --duplicates --starttime" in out and "duplicate record" not in out
    assert "from 11 sacct records" in out


# ----- the live cluster ------------------------------------------------------------------------

@pytest.mark.slurm
def test_live_import_from_the_test_cluster(slurm_cluster, tmp_path, capsys):
    trace, vcs = tmp_path / "live.csv", tmp_path / "vcs.csv"
    rc = main(["import-sacct", "--live", "--start", "2000-01-01", "--out", str(trace), "--vc-config-out", str(vcs)])
    cap = capsys.readouterr()
    if rc == 2 and "no jobs to write" in cap.err:  # a fresh cluster with no finished GPU job yet
        assert cap.err.startswith("lucidctl: error: sacct --json --allusers --duplicates --starttime 2000-01-01T00:00:00")
        return
    assert rc == 0, cap.err
    t = load_trace(trace, "csv")
    assert len(t.jobs) >= 1 and (t.jobs["gpu_num"] >= 1).all()
    # the same jobs as this test's own read of sacct (through the CLI's rules), give or take a job
    # that finished in between
    raw = json.loads(subprocess.run(["sacct", "--json", "--allusers", "--duplicates", "--starttime", "2000-01-01"],
                                    capture_output=True, text=True, timeout=120, check=True).stdout)
    direct, _ = sacct_json_to_trace(raw)
    assert set(t.jobs["job_id"]) <= set(direct["job_id"])
    cfg = pd.read_csv(vcs)
    assert set(cfg["vc"]) == set(t.jobs["vc"]) and (cfg["gpus_per_node"] == 8).all()


def test_a_live_start_in_the_future_is_refused_before_sacct_runs(tmp_path):
    """It passed on sacct's own "Start time ... requested is after end time"."""
    from argparse import Namespace

    from lucidd.sacct_import import cmd_import_sacct

    runner = _FakeRunner()
    args = Namespace(json_file=None, live=True, start="2999-01-01", end=None, sinfo_json=None,
                     out=str(tmp_path / "t.csv"), vc_config_out=None, keep_cpu_jobs=False, default_vc="main",
                     lucid_partitions=None, json=False)
    with pytest.raises(SacctImportError, match=r"--start 2999-01-01: in the future"):
        cmd_import_sacct(args, runner=runner)
    assert runner.calls == []


def test_an_end_far_ahead_without_start_names_end(tmp_path):
    from argparse import Namespace

    from lucidd.sacct_import import cmd_import_sacct

    args = Namespace(json_file=None, live=True, start=None, end="2999-01-01", sinfo_json=None,
                     out=str(tmp_path / "t.csv"), vc_config_out=None, keep_cpu_jobs=False, default_vc="main",
                     lucid_partitions=None, json=False)
    with pytest.raises(SacctImportError, match=r"^--end 2999-01-01: the start it implies \(30 days before"):
        cmd_import_sacct(args, runner=_FakeRunner())


def test_users_sacct_json_leaves_out_are_read_from_its_text_output_or_counted(tmp_path, capsys):
    """sacct --json (22.05) writes `user: null` for users without a slurmdbd association: 78 of 131
    jobs of an admin trial were imported without a user, and the report said nothing."""
    from argparse import Namespace

    from lucidd.sacct_import import cmd_import_sacct

    data = json.loads(SACCT.read_text())
    for rec in data["jobs"]:
        rec["user"], rec["association"] = None, None
    saved = tmp_path / "sacct.json"
    saved.write_text(json.dumps(data))

    class Runner(_FakeRunner):
        def run_json(self, argv, object_hook=None):
            self.calls.append(argv)
            return json.loads((saved if argv[0] == "sacct" else SINFO).read_text(), object_hook=object_hook)

        def run(self, argv):
            self.calls.append(argv)
            return "".join(f"{rec['job_id']}|www-data\n" for rec in data["jobs"])

    def args(**kw):
        base = dict(json_file=None, live=False, start="2000-01-01", end=None, sinfo_json=None,
                    out=str(tmp_path / "t.csv"), vc_config_out=None, keep_cpu_jobs=False, default_vc="main",
                    lucid_partitions=None, json=False)
        return Namespace(**{**base, **kw})

    runner = Runner()
    assert cmd_import_sacct(args(live=True), runner=runner) == 0
    assert runner.calls[1][:2] == ["sacct", "--allusers"] and "JobIDRaw,User" in runner.calls[1]
    users = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    assert set(users["user"]) == {"www-data"}
    capsys.readouterr()
    assert cmd_import_sacct(args(json_file=str(saved)), runner=None) == 0  # saved JSON: counted, said
    assert f"{len(users)} job(s) without a user" in capsys.readouterr().out


def test_the_report_says_how_slurm_ran_the_jobs(tmp_path):
    """An admin compared simulate's `slurm` row with nothing: the history's own figures were in the
    trace, not in any output (an admin trial)."""
    data = json.loads(SACCT.read_text())
    trace, rep = sacct_json_to_trace(data)
    r = rep.as_it_ran
    assert set(r) == {"avg_jct_s", "avg_queue_s", "p999_queue_s"} and r["avg_jct_s"] >= r["avg_queue_s"] >= 0
    assert any(line.startswith("as Slurm ran them: avg JCT") for line in rep.lines())
    assert "as_it_ran" in rep.to_dict()


def test_a_record_with_no_partition_is_not_called_one_of_lucidds(tmp_path):
    """A review: a record with an empty partition was reported as "ran only in lucidd's partition
    'default'", and `default` is no partition of lucidd's."""
    data = _data()
    rec = copy.deepcopy(_rec(data, 5))
    rec["partition"] = ""
    df, rep = sacct_json_to_trace(_only(data, rec))
    assert list(df["vc"]) == ["default"] and rep.vc_no_partition == 1 and not rep.vc_lucid_left
    assert any("no partition in their records" in line for line in rep.lines())


def _as_2311(rec):
    """A 22.05 record in 23.11's shapes: numbers as {"set", "infinite", "number"}, the state a list of
    flags with the base state first (slurmdbd stores a requeued run as JOB_PENDING | JOB_REQUEUE,
    which 23.11's sacct writes as ["PENDING", "REQUEUED"])."""
    r = copy.deepcopy(rec)
    for k in ("submission", "eligible", "start", "end"):
        r["time"][k] = {"set": True, "infinite": False, "number": r["time"][k]}
    state = r["state"]["current"]
    r["state"]["current"] = ["PENDING", "REQUEUED"] if state == "REQUEUED" else [state]
    return r


def test_a_requeue_in_23_11s_state_list_is_one_job_with_its_first_submission():
    """Read by its first flag, 23.11's requeued run was PENDING: dropped as not finished, and the
    rerun became job 9#2, submitted at the requeue (every job lucidd profiles, in a 23.11 history)."""
    data = json.loads(SACCT_LUCIDD.read_text())
    data["jobs"] = [_as_2311(r) for r in data["jobs"]]
    df, rep = sacct_json_to_trace(data)
    assert rep.dropped == {"never started": 3} and len(df) == 33 and rep.requeued == 5 and not rep.ids_reused
    by = df.set_index("job_id")
    assert by.loc["9", "requeues"] == 1 and by.loc["9", "submit_time"] == _iso(FIRST_SUBMIT_9)


def test_the_daemons_history_reads_23_11s_state_list_as_one_word():
    from lucidd.backends.slurm import sacct_rows

    data = json.loads(SACCT_LUCIDD.read_text())
    rows = sacct_rows({"jobs": [_as_2311(r) for r in data["jobs"]]})
    assert {r["state"] for r in rows} == {r["state"]["current"] for r in data["jobs"]}


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED", "FAILED"])
def test_a_run_slurm_requeued_itself_is_one_job_with_the_rerun(state):
    """A node failure, a preemption or RequeueExit requeues without the REQUEUED state: the run is
    recorded NODE_FAIL / PREEMPTED / FAILED and the rerun's submission is that run's end (Slurm sets
    a new submit time at the requeue). Before, the two were counted as a reused id: an extra job
    and the rerun's wait lost."""
    data = _data()
    first, second = (copy.deepcopy(_rec(data, 9, p)) for p in ("profiling", "research"))
    first["state"]["current"] = state
    df, rep = sacct_json_to_trace(_only(data, first, second))
    assert list(df["job_id"]) == ["9"] and not rep.ids_reused and rep.requeued == 1
    assert df["submit_time"].tolist() == [_iso(FIRST_SUBMIT_9)]


def test_a_requeued_run_whose_rerun_was_lost_is_not_merged_with_a_job_given_its_id_weeks_later():
    data = _data()
    first, later = copy.deepcopy(_rec(data, 9, "profiling")), copy.deepcopy(_rec(data, 9, "research"))
    for k in ("submission", "eligible", "start", "end"):
        later["time"][k] += 20 * 86400
    df, rep = sacct_json_to_trace(_only(data, first, later))
    # the later job keeps the plain id: the record it shares it with is not written
    assert list(df["job_id"]) == ["9"] and rep.dropped == {"not finished": 1} and not rep.ids_reused
    assert df["submit_time"].tolist() == [_iso(later["time"]["eligible"])]  # (a requeue's BeginTime: +3 s)


def test_the_same_record_twice_is_one_run():
    """Two monthly exports both hold the jobs that ran across the month's end: merged, each such job
    was counted twice (as a reused id)."""
    data = _data()
    df, rep = sacct_json_to_trace(_only(data, _rec(data, 10), _rec(data, 10), _rec(data, 5)))
    assert sorted(df["job_id"]) == ["10", "5"] and not rep.ids_reused and rep.dropped == {"duplicate record": 1}


def test_a_job_that_waited_for_a_dependency_or_a_begin_time_is_submitted_when_it_became_eligible():
    """`--dependency` and `--begin` jobs: Slurm could not start them before their eligible time, and a
    replay that submits them at their submission lets every stage of a pipeline run at once."""
    data = _data()
    r = copy.deepcopy(_rec(data, 10))
    r["time"]["eligible"] = r["time"]["submission"] + 7200
    r["time"]["start"] = r["time"]["eligible"] + 5
    r["time"]["end"] = r["time"]["start"] + 30
    df, rep = sacct_json_to_trace(_only(data, r))
    assert df["submit_time"].tolist() == [_iso(r["time"]["eligible"])]
    assert df["ineligible_s"].tolist() == [7200] and rep.waited_eligible == 1
    assert rep.as_it_ran["avg_queue_s"] == 5
    assert any("eligible" in line for line in rep.lines())


def test_sinfo_json_of_slurm_23_02_and_later_gives_the_vc_config():
    """From 23.02 `sinfo --json` is a list of node groups per partition (`sinfo`), not `nodes`."""
    nodes = json.loads(SINFO.read_text())["nodes"]
    groups = {}
    for n in nodes:
        for p in n["partitions"]:
            groups.setdefault((p, n["gres"]), []).append(n["name"])
    new = {"sinfo": [{"nodes": {"nodes": names, "total": len(names)}, "gres": {"total": gres, "used": ""},
                      "partition": {"name": p}} for (p, gres), names in groups.items()]}
    df, _ = sacct_json_to_trace(json.loads(SACCT.read_text()))
    old_cfg, _ = vc_config_from_sinfo(json.loads(SINFO.read_text()), df)
    new_cfg, _ = vc_config_from_sinfo(new, df)
    assert new_cfg.to_dict("records") == old_cfg.to_dict("records")


def test_a_saved_file_is_read_without_the_records_steps():
    """Only what the import reads of a record is kept as the file is parsed (100,000 jobs took
    3.4 GB: 4.7x the file), and the trace is the same."""
    from lucidd.sacct_import import SACCT_RECORD_KEYS, compact_sacct_record

    data = read_json_file(SACCT, object_hook=compact_sacct_record)
    assert all(set(r) <= SACCT_RECORD_KEYS for r in data["jobs"]) and not any("steps" in r for r in data["jobs"])
    assert "meta" in data or "errors" in data  # the reply's other objects are left as they were
    full, rep_full = sacct_json_to_trace(json.loads(SACCT.read_text()), source="x")
    small, rep_small = sacct_json_to_trace(data, source="x")
    pd.testing.assert_frame_equal(full, small)
    assert rep_full.to_dict() == rep_small.to_dict()


def test_live_windows_shrink_after_a_big_one(tmp_path, monkeypatch):
    """A window of many records is followed by one half as long (a large cluster's month in one
    sacct call held it all in memory twice and could outrun the command's timeout)."""
    from argparse import Namespace

    import lucidd.sacct_import as si

    monkeypatch.setattr(si, "LIVE_WINDOW_RECORDS", 5)  # the test file's 11 records: a big window
    runner = _FakeRunner()
    args = Namespace(json_file=None, live=True, start="2026-11-01T00:00:00Z", end="2026-11-29T00:00:00Z",
                     sinfo_json=None, out=str(tmp_path / "t.csv"), vc_config_out=None,
                     keep_cpu_jobs=False, default_vc="main", lucid_partitions=None, json=False)
    assert si.cmd_import_sacct(args, runner=runner) == 0
    spans = [si.parse_when(w[7], "e") - si.parse_when(w[5], "s") for w in runner.calls]
    assert spans[:3] == [7 * 86400, 3.5 * 86400, 1.75 * 86400] and sum(spans) == 28 * 86400
