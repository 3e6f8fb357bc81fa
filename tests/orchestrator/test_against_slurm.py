"""`lucidctl simulate`'s notes on where a Lucid-on-Slurm replay is behind `slurm`, and why."""

import json

from orchestrator.against_slurm import behind_slurm, describe


def row(policy, avg, p999):
    return {"policy": policy, "avg_jct_s": avg, "p999_queue_s": p999}


def test_nothing_without_slurm_or_where_lucid_is_not_behind():
    assert behind_slurm([row("lucid", 10, 10)], {}, 1.2, 32, 10.0) == []
    rows = [row("slurm", 100, 1000), row("lucid", 90, 1000), row("fifo", 500, 9000)]
    assert behind_slurm(rows, {}, 1.2, 32, 10.0) == []  # a tie is not behind; baselines are not judged


def test_an_overloaded_tail_names_the_runs_done_twice_and_the_load():
    rows = [row("slurm", 89_799, 342_188), row("lucid", 48_381, 402_508), row("lucid-noprofiler", 83_225, 364_714)]
    prof = {"lucid": {"requeued": 361, "lost_gpu_s": 219 * 3600.0}, "lucid-noprofiler": {"requeued": 0}}
    out = behind_slurm(rows, prof, 1.129, 32, 10.0)
    assert [e["policy"] for e in out] == ["lucid", "lucid-noprofiler"]
    lucid, noprof = out
    assert lucid["behind"] == {"p999_queue_s": [402_508, 342_188]}  # the average is ahead: not listed
    assert [c["cause"] for c in lucid["causes"]] == ["profiling runs done twice", "overload"]
    assert lucid["causes"][0] == {"cause": "profiling runs done twice", "requeued": 361, "gpu_h": 219.0,
                                  "cluster_h": 6.84}
    assert [c["cause"] for c in noprof["causes"]] == ["overload"]
    text = describe(lucid)
    assert "p99.9 queue 402,508 s against 342,188 s (+17.6 %)" in text
    assert "361 profiling runs" in text and "219 GPU-h done twice (6.8 h of the whole cluster)" in text
    assert "offered load is 113 %" in text and "work done twice and GPUs left idle" in text
    assert "lucid-noprofiler replays the same order" in text
    assert "work done twice" not in describe(noprof) and "lucid-noprofiler replays" not in describe(noprof)
    assert not lucid["small_gap"] and "luck" not in text
    json.dumps(out)  # plain data, as `--json simulate` prints it


def test_a_gap_within_one_interval_is_the_inbox_wait_alone():
    rows = [row("slurm", 9_092, 59_707), row("lucid", 8_382, 59_711)]
    (e,) = behind_slurm(rows, {"lucid": {"requeued": 165, "lost_gpu_s": 128 * 3600.0}}, 0.77, 64, 10.0)
    assert e["causes"] == [{"cause": "inbox wait", "interval_s": 10.0}]  # not the 128 GPU-h: they are hours
    text = describe(e)
    assert "(+4 s)" in text and "within one reconcile interval (10 s)" in text and "profiling runs" not in text
    assert e["small_gap"] and "under 2 % can be one replay's luck" in text


def test_no_profiling_and_no_overload_leaves_the_order():
    rows = [row("slurm", 9_092, 59_707), row("lucid-noprofiler", 8_191, 63_166)]
    (e,) = behind_slurm(rows, {}, 0.77, 64, 10.0)
    assert e["causes"] == [{"cause": "order", "offered_load": 0.77}]
    assert "below 100 %" in describe(e) and "lucidctl explain job ID --sim-out DIR" in describe(e)
    # behind on the average past 100 % load: not overload's (that names the tail), and no "below 100 %"
    (e,) = behind_slurm([row("slurm", 100, 1000), row("lucid-oracle", 120, 900)], {}, 1.3, 8, 10.0)
    assert e["causes"] == [{"cause": "order", "offered_load": 1.3}] and "below 100 %" not in describe(e)
    assert "avg JCT 120 s against 100 s (+20.0 %)" in describe(e)


def test_simulate_prints_them_and_json_carries_them(tmp_path, capsys):
    from lucidd.cli import main

    args = ["simulate", "--policies", "slurm,lucid,lucid-noprofiler", "--scale-nodes", "0.5", "--no-progress",
            "--no-plots"]
    assert main(["--json", *args, "--out", str(tmp_path / "j")]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = {r["policy"]: r for r in d["summary"]}
    behind = {p for p in ("lucid", "lucid-noprofiler")
              if rows[p]["avg_jct_s"] > rows["slurm"]["avg_jct_s"]
              or rows[p]["p999_queue_s"] > rows["slurm"]["p999_queue_s"]}
    assert behind  # the bundled sample on half its nodes is past 100 % load: both tails are behind
    assert {e["policy"] for e in d["behind_slurm"]} == behind  # one entry exactly where the table says so
    assert main([*args, "--out", str(tmp_path / "t")]) == 0
    text = capsys.readouterr().out
    assert sum(line.startswith(f"note: {p} is behind slurm") for line in text.splitlines() for p in behind) == len(behind)
    assert main(["--json", "simulate", "--policies", "fifo,lucid", "--no-progress", "--no-plots",
                 "--out", str(tmp_path / "n")]) == 0
    assert json.loads(capsys.readouterr().out)["behind_slurm"] == []  # no slurm row, nothing to be behind
