"""Issue 12, "First contact": what a new user meets in the first hour, one test per case.

Every bad input exits 2 with one line `lucidctl: error: ...` naming the flag, file, row or column,
never a traceback, and before any long work starts (no trace read for a bad flag or --out, no
replay for a flag that needs the cluster).
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import lucidd.experiment
import lucidd.traces
from lucidd.cli import main

REPO = Path(__file__).resolve().parents[2]
ONE_JOB = ("job_id,user,vc,gpu_num,submit_time,duration,model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem\n"
           "1,u,a,1,0,36000,m,d,32,0,100,50,30,2000\n")
SMALL = "job_id,user,vc,gpu_num,submit_time,duration\n1,u,a,1,0,100\n2,u,a,2,10,50\n3,v,a,8,20,300\n"


def run(argv, capsys):
    """lucidctl in-process: (exit status, stdout, stderr)."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, err, *needles):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lucidctl: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a trace is read or a policy replayed."""
    calls = {"load": 0, "run": 0}
    real_load = lucidd.traces.load_trace

    def load(*a, **k):
        calls["load"] += 1
        return real_load(*a, **k)

    def replay(*a, **k):
        calls["run"] += 1
        raise AssertionError("a replay started before the bad input was reported")

    monkeypatch.setattr(lucidd.traces, "load_trace", load)
    monkeypatch.setattr(lucidd.experiment.Experiment, "run", replay)
    return calls


@pytest.fixture
def small_trace(tmp_path):
    p = tmp_path / "small.csv"
    p.write_text(SMALL)
    return p


# ----- tracebacks instead of messages ------------------------------------------------------------

def test_one_job_trace_runs_every_lucid_variant_on_a_one_node_cluster(tmp_path, capsys):
    trace = tmp_path / "one.csv"
    trace.write_text(ONE_JOB)
    rc, out, err = run(["--json", "simulate", "--trace", str(trace), "--out", str(tmp_path / "o"), "--no-progress",
                        "--no-plots", "--policies", "tiresias,lucid,lucid-noprofiler,lucid-nopacking,lucid-oracle,"
                        "lucid-standalone,lucid-standalone-noprofiler,lucid-standalone-nopacking,"
                        "lucid-standalone-oracle"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["cluster"] == {"a": {"nodes": 1, "gpus_per_node": 8}}  # not 567 (or 5,000) nodes for one GPU
    assert all(row["jobs"] == 1 for row in d["summary"])
    assert any("every job gets the most common class" in n for n in d["notes"])
    assert "Traceback" not in err


def test_one_class_packing_labels_on_a_larger_trace(tmp_path, capsys):
    rows = [f"{i},u,a,1,{i * 60},600,m,d,32,0,100,50,30,2000" for i in range(1, 30)]
    trace = tmp_path / "alike.csv"
    trace.write_text(ONE_JOB.splitlines()[0] + "\n" + "\n".join(rows) + "\n")
    rc, out, err = run(["simulate", "--trace", str(trace), "--out", str(tmp_path / "o"), "--no-progress",
                        "--no-plots", "--policies", "lucid-standalone"], capsys)  # the engine that packs
    assert rc == 0, err
    assert "Tiny/Medium/Jumbo = 29/0/0" in out


def test_packing_model_fit_still_refuses_one_class_unless_asked():
    from models.base import ModelError
    from models.packing import PackingModel

    table = pd.DataFrame({"gpu_util": [50.0, 60.0], "gmem_util": [30.0, 31.0], "gmem": [2000.0, 2100.0],
                          "amp": [0, 1], "label": [1, 1]})
    with pytest.raises(ModelError):
        PackingModel().fit(table)
    m = PackingModel().fit(table, allow_constant=True)
    assert m.evaluation()["constant"] and m.predict_one(99, 99, 20000, 1) == 1
    assert m.explain({"gpu_util": 1, "gmem_util": 1, "gmem": 1, "amp": 0}).prediction == 1


def test_one_job_trace_under_tune(tmp_path, capsys):
    trace = tmp_path / "one.csv"
    trace.write_text(ONE_JOB)
    rc, out, err = run(["tune", "--trace", str(trace), "--out", str(tmp_path / "t"), "--workers", "1"], capsys)
    assert rc == 0, err
    assert "one.csv" in out and "Traceback" not in err


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_out_is_a_file(tmp_path, capsys, no_work, command):
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0\n")
    rc, _, err = run([command, "--out", str(f)], capsys)
    assert_one_line_error(rc, err, "--out", str(f), "not a directory")
    assert no_work["load"] == 0 and f.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_out_below_a_file(tmp_path, capsys, no_work, command):
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = run([command, "--out", str(f / "sub")], capsys)
    assert_one_line_error(rc, err, "--out", "not a directory")
    assert no_work["load"] == 0


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_out_not_writable(tmp_path, capsys, no_work, command):
    if os.geteuid() == 0:  # root writes anywhere mode bits allow nothing; /proc refuses even root
        target = "/proc"
    else:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o500)
        target = str(d)
    rc, _, err = run([command, "--out", target], capsys)
    assert_one_line_error(rc, err, "--out", target, "cannot write")
    assert no_work["load"] == 0


# ----- bad flag values: range checks naming the flag ----------------------------------------------

BAD_FLAGS = [
    (["simulate", "--tprof", "-5"], "--tprof -5"),
    (["simulate", "--tprof", "0"], "--tprof 0"),
    (["simulate", "--gss", "7"], "--gss 7"),
    (["simulate", "--gss", "-1"], "--gss -1"),
    (["simulate", "--starvation-s", "-10"], "--starvation-s -10"),
    (["simulate", "--aging-halflife-s", "-1"], "--aging-halflife-s -1"),
    (["simulate", "--long-tprof-s", "-1"], "--long-tprof-s -1"),
    (["simulate", "--long-tprof-s", "604801"], "--long-tprof-s 604801"),
    (["simulate", "--cprof", "-1"], "--cprof -1"),
    (["simulate", "--nprof", "0"], "--nprof 0"),
    (["simulate", "--gpus-per-node", "0"], "--gpus-per-node 0"),
    (["simulate", "--gpus-per-node", "65"], "--gpus-per-node 65"),
    (["simulate", "--nodes", "0"], "--nodes 0"),
    (["simulate", "--nodes", "-3"], "--nodes -3"),
    (["simulate", "--policies", ","], "--policies"),
    (["simulate", "--policies", "fifo,fifo"], "--policies"),
    (["simulate", "--policies", "fifo,nope"], "nope"),
    (["simulate", "--tprof", "abc"], "--tprof"),
    (["simulate", "--colocation", "missing.csv"], "--colocation missing.csv"),
    (["simulate", "--profiles", "missing.csv"], "--profiles missing.csv"),
    (["simulate", "--estimates", "missing.csv"], "--estimates missing.csv"),
    (["simulate", "--vc-config", "missing.csv"], "--vc-config missing.csv"),
    (["tune", "--workers", "0"], "--workers 0"),
    (["tune", "--tail-slack", "-1"], "--tail-slack -1"),
    (["tune", "--tail-slack", "nan"], "--tail-slack nan"),
    (["tune", "--reference", "nope"], "--reference nope"),
    (["tune", "--gss", "7"], "--gss 7"),
    (["tune", "--starvation-s", "-10"], "--starvation-s -10"),
    (["tune", "--nodes", "0"], "--nodes 0"),
    (["tune", "--gpus-per-node", "0"], "--gpus-per-node 0"),
]


@pytest.mark.parametrize("argv,needle", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_value_is_one_line_naming_the_flag(tmp_path, capsys, no_work, argv, needle):
    rc, _, err = run([*argv, "--out", str(tmp_path / "o")], capsys)
    assert_one_line_error(rc, err, needle)
    assert no_work["load"] == 0  # checked before the trace is read
    assert not (tmp_path / "o").exists()


def test_gpus_per_node_is_blamed_not_the_vc_file(tmp_path, capsys, no_work):
    vcs = tmp_path / "vcs.csv"
    vcs.write_text(",num\na,2\n")
    rc, _, err = run(["simulate", "--vc-config", str(vcs), "--gpus-per-node", "0", "--out", str(tmp_path / "o")],
                     capsys)
    line = assert_one_line_error(rc, err, "--gpus-per-node 0")
    assert "vcs.csv" not in line


def test_nodes_with_a_vc_config_is_refused_not_ignored(tmp_path, capsys, no_work):
    vcs = tmp_path / "vcs.csv"
    vcs.write_text(",num\na,2\n")
    rc, _, err = run(["simulate", "--vc-config", str(vcs), "--nodes", "0", "--out", str(tmp_path / "o")], capsys)
    assert_one_line_error(rc, err, "--nodes 0")
    rc, _, err = run(["simulate", "--vc-config", str(vcs), "--nodes", "4", "--out", str(tmp_path / "o")], capsys)
    assert_one_line_error(rc, err, "--nodes 4", "--vc-config")


def test_nodes_replaces_the_samples_own_vcs(tmp_path, capsys):
    rc, out, err = run(["--json", "simulate", "--nodes", "20", "--policies", "fifo", "--no-plots", "--no-progress",
                        "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    assert json.loads(out)["cluster"] == {"all": {"nodes": 20, "gpus_per_node": 8}}


@pytest.mark.parametrize("argv,needle", [
    (["--cprof", "1000"], "--cprof 1000"),
    (["--nprof", "17"], "--nprof 17"),
    (["--cprof", "1", "--nprof", "9"], "--nprof 9"),
])
def test_flags_checked_against_the_cluster_before_any_replay(tmp_path, capsys, no_work, argv, needle):
    rc, _, err = run(["simulate", *argv, "--policies", "lucid,lucid-standalone", "--out", str(tmp_path / "o")],
                     capsys)
    assert_one_line_error(rc, err, needle)
    assert no_work["run"] == 0


def test_nprof_larger_than_a_node_is_lucidds_own_value_for_lucid(tmp_path, capsys):
    """`lucid` profiles in a partition over every node, as lucidd does: --nprof 16 (which lucidd's
    `nprof_gpus` accepts) was refused against lucid-standalone's one profiling node."""
    finished = {}
    for nprof in ("16", "1"):
        rc, out, err = run(["--json", "simulate", "--nprof", nprof, "--policies", "lucid", "--no-plots",
                            "--no-progress", "--out", str(tmp_path / nprof)], capsys)
        assert rc == 0, err
        finished[nprof] = json.loads(out)["summary"][0]["profiler_finished"]
    assert finished["16"] > finished["1"]  # the value reaches the replay


def test_colocation_and_profiles_are_checked_up_front(tmp_path, capsys, no_work):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    rc, _, err = run(["simulate", "--colocation", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert_one_line_error(rc, err, "--colocation", "bad.csv", "column")
    rc, _, err = run(["simulate", "--profiles", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert_one_line_error(rc, err, "--profiles", "bad.csv", "column 'model'")
    assert no_work["load"] == 0


def test_errors_through_a_real_process_are_one_line(tmp_path):
    """The same contract seen from a shell: exit 2, one line on stderr, nothing on stdout."""
    for argv in (["simulate", "--gss", "7"], ["tune", "--tail-slack", "-1"], ["simulate", "--bogus"],
                 ["simulate", "--out", "/proc/none/x"]):
        r = subprocess.run([sys.executable, "-m", "lucidd.cli", *argv], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == "", (argv, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("lucidctl: error: "), r.stderr


# ----- missing columns: named with or without --format ---------------------------------------------

@pytest.mark.parametrize("fmt", [None, "csv"])
def test_missing_column_is_named(tmp_path, capsys, fmt):
    trace = tmp_path / "nodur.csv"
    trace.write_text("job_id,user,vc,gpu_num,submit_time\n1,u,a,1,0\n")
    argv = ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o")] + (["--format", fmt] if fmt else [])
    rc, _, err = run(argv, capsys)
    line = assert_one_line_error(rc, err, "nodur.csv", "row 1", "column 'duration'")
    assert len(line) < 400


# ----- outputs ------------------------------------------------------------------------------------

def test_rerun_into_the_same_out_leaves_only_this_runs_files(tmp_path, capsys, small_trace):
    out = tmp_path / "o"
    base = ["simulate", "--trace", str(small_trace), "--nodes", "2", "--out", str(out), "--no-progress"]
    assert run([*base, "--policies", "fifo,sjf,lucid"], capsys)[0] == 0
    assert (out / "jobs_sjf.csv").exists() and (out / "models" / "index.json").exists()
    assert run([*base, "--policies", "fifo", "--no-plots"], capsys)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["jobs_fifo.csv", "manifest.json", "summary.csv"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == ["jobs_fifo.csv", "summary.csv"] and manifest["command"] == "simulate"
    assert manifest["policies"] == ["fifo"] and manifest["trace"].endswith("small.csv")


def test_an_out_holding_other_files_is_refused_and_left_alone(tmp_path, capsys, no_work, small_trace):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "jobs_old.csv").write_text("stale")
    rc, _, err = run(["simulate", "--trace", str(small_trace), "--out", str(out)], capsys)
    assert_one_line_error(rc, err, "--out", "notes.txt")
    assert (out / "notes.txt").read_text() == "mine" and (out / "jobs_old.csv").exists()
    assert no_work["load"] == 0


def test_pre_manifest_outputs_are_recognised_as_ours(tmp_path, capsys, small_trace):
    out = tmp_path / "o"
    (out / "models").mkdir(parents=True)
    for name in ("summary.csv", "jobs_srtf.csv", "timeline.png", "models/index.json", "models/duration_v1.joblib"):
        (out / name).write_text("old")
    rc, _, err = run(["simulate", "--trace", str(small_trace), "--nodes", "1", "--policies", "fifo", "--no-plots",
                      "--no-progress", "--out", str(out)], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["jobs_fifo.csv", "manifest.json", "summary.csv"]


def test_tune_out_is_gitignored():
    r = subprocess.run(["git", "check-ignore", "-q", "tune-out/proposal.json"], cwd=REPO)
    if r.returncode == 128:
        pytest.skip("not a git checkout")
    assert r.returncode == 0


def test_sample_generator_needs_out_and_never_overwrites_the_bundled_sample(tmp_path):
    bundled = REPO / "lucidd" / "data" / "sample_trace.csv"
    before = hashlib.sha256(bundled.read_bytes()).hexdigest()
    r = subprocess.run([sys.executable, "-m", "lucidd.sample"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 2 and "--out" in r.stderr
    assert hashlib.sha256(bundled.read_bytes()).hexdigest() == before


# ----- messages -----------------------------------------------------------------------------------

def test_bad_row_suggests_the_flag_not_the_python_keyword(tmp_path, capsys):
    trace = tmp_path / "bad.csv"
    trace.write_text("job_id,gpu_num,submit_time,duration\n1,1,0,-5\n2,1,0,5\n")
    rc, _, err = run(["simulate", "--trace", str(trace), "--nodes", "1", "--out", str(tmp_path / "o")], capsys)
    line = assert_one_line_error(rc, err, "bad.csv", "row 2", "column 'duration'", "--skip-bad-rows")
    assert "skip_bad_rows" not in line


def test_missing_optional_columns_are_said_to_be_harmless(tmp_path, capsys, small_trace):
    rc, out, err = run(["simulate", "--trace", str(small_trace), "--nodes", "1", "--policies", "fifo", "--no-plots",
                        "--no-progress", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if "not in the file" in ln)
    assert "fine" in line and "name (" in line and "workload (" in line


def test_daemon_commands_speak_plainly():
    from lucidd import cli

    src = Path(cli.__file__).read_text()
    assert "live-cluster issue" not in src and "arrives with" not in src


def test_tune_names_its_trace_and_its_figures(tmp_path, capsys, small_trace):
    rc, out, err = run(["tune", "--trace", str(small_trace), "--nodes", "2", "--workers", "1",
                        "--out", str(tmp_path / "t")], capsys)
    assert rc == 0, err
    assert out.startswith("replaying ") and "small.csv" in out.splitlines()[0]
    assert "replayed:" in out and "single replays" in out
    assert all("replayed" in ln for ln in out.splitlines() if ln.startswith("  - ") and "avg JCT (" in ln)
    d = json.loads((tmp_path / "t" / "proposal.json").read_text())
    assert d["context"]["trace"].endswith("small.csv") and d["context"]["jobs"] == 3
    assert sorted(json.loads((tmp_path / "t" / "manifest.json").read_text())["files"]) == \
        ["proposal.json", "tuning_points.csv"]


def test_help_texts(capsys):
    def help_of(*argv):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return " ".join(capsys.readouterr().out.split())

    explain = help_of("explain")
    assert "{job} id" not in explain and "job ID" in explain
    tune = help_of("tune")
    assert "GPUs per node (default 8" in tune and "(default 0.0" in tune
    assert "tiresias,lucid" in help_of("simulate")


# ----- plots --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_results():
    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

    exp = make_experiment(load_trace(sample_trace_path()), vc_config=sample_vc_config_path())
    return [exp.run(p) for p in ("fifo", "sjf", "srtf", "tiresias", "lucid")]


def test_timeline_has_a_row_per_policy_a_labelled_capacity_and_a_title(sample_results):
    import matplotlib.pyplot as plt

    from lucidd.plots import timeline_figure

    fig = timeline_figure(sample_results, title="sample_trace.csv: 2,500 jobs on 3 VCs, 12 nodes, 96 GPUs")
    try:
        axes = fig.axes
        assert len(axes) == 2 * len(sample_results)
        assert [axes[2 * i].get_ylabel() for i in range(len(sample_results))] == [r.policy for r in sample_results]
        assert all(len(ax.get_lines()) >= 1 for ax in axes)
        queue_axes = axes[0::2]
        assert all(ax.get_yscale() == "symlog" for ax in queue_axes)  # FIFO's queue cannot flatten the rest
        assert len({ax.get_ylim() for ax in queue_axes}) == 1  # one scale: rows compare
        assert all(any("capacity: 96 GPUs" in t.get_text() for t in ax.texts) for ax in axes[1::2])
        assert "sample_trace.csv" in fig._suptitle.get_text()
        colors = [ax.get_lines()[0].get_color() for ax in queue_axes]
        assert len(set(map(str, colors))) == len(colors)
    finally:
        plt.close(fig)


def test_jct_cdf_lines_differ_and_the_title_names_the_trace(sample_results):
    import matplotlib.pyplot as plt

    from lucidd.plots import jct_cdf_figure

    fig = jct_cdf_figure(sample_results, title="sample_trace.csv on 12 nodes")
    try:
        lines = fig.axes[0].get_lines()
        assert len(lines) == len(sample_results)
        assert len({(str(ln.get_color()), ln.get_linestyle()) for ln in lines}) == len(lines)
        assert "sample_trace.csv" in fig.axes[0].get_title()
    finally:
        plt.close(fig)


def test_plot_titles_name_the_trace_and_the_cluster(tmp_path, capsys, monkeypatch, small_trace):
    import lucidd.plots

    titles = []
    for name in ("plot_jct_cdf", "plot_timeline"):
        monkeypatch.setattr(lucidd.plots, name, lambda results, path, title=None, **kw: titles.append(title))
    rc, _, err = run(["simulate", "--trace", str(small_trace), "--nodes", "2", "--policies", "fifo,sjf",
                      "--no-progress", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    assert titles == [f"{small_trace.parent.name}/small.csv: 3 jobs on 1 VC, 2 nodes, 16 GPUs"] * 2


def test_out_never_removes_a_users_file_or_an_input(tmp_path):
    """A file named like our outputs is the user's unless a manifest (or an earlier run's
    summary.csv) says otherwise; an input of the run is never removed."""
    from lucidd.cli import main
    from lucidd.traces import sample_trace_path

    trace = tmp_path / "jobs_mine.csv"
    trace.write_bytes(open(sample_trace_path(), "rb").read())
    assert main(["simulate", "--trace", str(trace), "--policies", "fifo", "--no-plots", "--no-progress",
                 "--out", str(tmp_path)]) == 2
    assert trace.exists()
    out = tmp_path / "o"
    assert main(["simulate", "--policies", "fifo", "--no-plots", "--no-progress", "--out", str(out)]) == 0
    assert oct((out / "manifest.json").stat().st_mode & 0o777) != "0o600"
    (out / "jobs_fifo.csv").rename(out / "keep.csv")
    assert main(["simulate", "--trace", str(out / "keep.csv"), "--format", "csv", "--policies", "fifo",
                 "--no-plots", "--no-progress", "--out", str(out)]) == 2  # keep.csv is not in the manifest


def test_lending_flags_reach_the_lucid_replay(tmp_path, capsys):
    # --no-lend --long-tprof-s 0 is lucidd's profiler before lending: the sample's lucid row then
    # differs from the default run's (lending and hour-long lent runs change which jobs profile)
    import csv

    rows = {}
    for name, extra in (("default", []), ("off", ["--no-lend", "--long-tprof-s", "0"])):
        out = tmp_path / name
        rc, _, err = run(["simulate", "--policies", "lucid", *extra, "--out", str(out), "--no-plots",
                          "--no-progress"], capsys)
        assert rc == 0, err
        manifest = (out / "manifest.json").read_text()
        assert ("--no-lend" in manifest) == (name == "off")
        rows[name] = next(csv.DictReader(open(out / "summary.csv")))
    assert rows["off"]["avg_jct_s"] != rows["default"]["avg_jct_s"]
