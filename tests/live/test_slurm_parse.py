"""The Slurm CLI backend (lucidd/backends/slurm.py): parsing real Slurm 22.05 replies (tests/live/data/,
see its README) and hand-made edge records, and SlurmRunner/SlurmBackend against fake commands."""

import json
import logging
import time

import pytest

from lucidd.backends.base import BackendError
from lucidd.backends.slurm import (SITE_FACTOR_MAX, SITE_FACTOR_MIN, SlurmBackend, SlurmCommandError, SlurmRunner,
                                   classify, gres_gpu_count, job_gpus, parse_job, parse_partitions, parse_sinfo,
                                   parse_squeue, sacct_rows)

from .fakeslurm import DATA, FakeSlurm


def load(name):
    return json.loads((DATA / name).read_text())


def by_id(jobs):
    return {j.job_id: j for j in jobs}


# ----- squeue --json (real replies) -------------------------------------------------------------

def test_squeue_inbox_reply():
    jobs = by_id(parse_squeue(load("squeue_inbox.json")))
    assert sorted(jobs) == list(range(9, 19))
    pending = [j for j in jobs.values() if j.pending]
    assert sorted(j.job_id for j in pending) == list(range(11, 19))
    for j in pending:
        assert (j.partition, j.state, j.reason) == ("inbox", "PENDING", "PartitionDown")
        assert j.start_time is None and j.end_time is None and j.time_limit_s is None
        assert j.user == "root" and j.account == "root" and j.submit_time == 1795457604
        assert not j.array_pending and j.restart_count == 0
    assert {i: jobs[i].gpus for i in range(11, 19)} == {11: 1, 12: 2, 13: 4, 14: 2, 15: 1, 16: 1, 17: 16, 18: 1}
    assert jobs[11].name == "short1" and jobs[11].cpus == 1 and jobs[11].nodes == 1
    # --gpus=1 -p research: GPUs from tres_per_job, the partition asked for from job_submit.lua's tag
    assert jobs[15].requested_partition == "research" and jobs[11].requested_partition is None
    assert jobs[16].requeue is False and jobs[11].requeue is True  # --no-requeue
    assert (jobs[17].nodes, jobs[17].gpus) == (2, 16)  # 2 nodes x gres:gpu:8
    assert jobs[18].opted_out_of_profiling and jobs[18].comment == "lucid:noprofile please"
    assert not jobs[11].opted_out_of_profiling
    # finished jobs are still listed (MinJobAge): ended, never pending
    assert jobs[10].ended and jobs[10].state == "COMPLETED" and jobs[10].end_time == 1795457418
    assert jobs[9].restart_count == 1 and jobs[9].ended and jobs[9].partition == "research"


def test_squeue_running_reply():
    jobs = by_id(parse_squeue(load("squeue_running.json")))
    for i in range(19, 24):
        assert jobs[i].partition == "profiling" and jobs[i].active and jobs[i].state == "RUNNING"
        assert jobs[i].start_time == 1795457653
    for i in (24, 25, 26):
        assert jobs[i].partition == "main" and jobs[i].active
    assert jobs[25].gpus == 16 and jobs[24].requeue is False
    # the nodes each runs on (job_resources), what lending counts per node
    assert jobs[19].node_names == ("gpu1",) and jobs[22].node_names == ("gpu2",)
    assert jobs[25].node_names == ("gpu3", "gpu4")
    assert jobs[19].excluded_nodes == "" and jobs[19].required_nodes == ""


def test_squeue_after_requeue_reply():
    jobs = by_id(parse_squeue(load("squeue_requeued.json")))
    j = jobs[14]
    assert (j.partition, j.state, j.reason, j.restart_count) == ("profiling", "PENDING", "BeginTime", 1)
    assert j.pending and j.submit_time == 1795457614  # Slurm reset it to the requeue time
    assert jobs[15].requested_partition == "research"


def test_squeue_time_limit_and_priority():
    jobs = by_id(parse_squeue(load("squeue_main_pending.json")))
    assert jobs[32].time_limit_s == 525600 * 60 and jobs[32].active
    assert jobs[33].time_limit_s is None and jobs[33].pending and jobs[33].reason == "None"
    assert all(j.priority > 0 for j in jobs.values())
    assert {i: jobs[i].gpus for i in jobs} == {32: 8, 33: 8, 34: 1, 35: 4, 36: 2}


# ----- sinfo --json and scontrol -o show partition (real replies) -------------------------------

def test_sinfo_idle_and_busy():
    idle = parse_sinfo(load("sinfo_idle.json"))
    assert sorted(idle) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert all(n.gpus == 8 and n.used == 0 and n.usable for n in idle.values())
    assert idle["gpu1"].state == "idle"
    assert idle["gpu3"].partitions == ("inbox", "profiling", "main", "research")
    busy = parse_sinfo(load("sinfo_busy.json"))
    assert {n: (v.gpus, v.used) for n, v in busy.items()} == {"gpu1": (8, 8), "gpu2": (8, 4), "gpu3": (8, 8),
                                                              "gpu4": (8, 8)}
    assert all(v.state == "mixed" and v.usable for v in busy.values())


def test_a_node_whose_cpus_are_all_taken_has_no_free_gpus():
    """A review: a CPU-only job can fill a GPU node's CPUs; its free GPUs were lent, and the run
    admitted there waited for hours (sinfo --json's idle_cpus, 22.05)."""
    rec = {"name": "gpu1", "gres": "gpu:8", "gres_used": "gpu:2(IDX:0-1)", "state": "mixed", "partitions": ["main"]}
    assert parse_sinfo({"nodes": [rec | {"idle_cpus": 12}]})["gpu1"].free_gpus == 6
    assert parse_sinfo({"nodes": [rec | {"idle_cpus": 0}]})["gpu1"].free_gpus == 0
    assert parse_sinfo({"nodes": [rec]})["gpu1"].free_gpus == 6  # not reported: GPUs alone


@pytest.mark.parametrize("fixture,inbox_up", [("partitions_inbox_down.txt", False), ("partitions_inbox_up.txt", True)])
def test_partitions(fixture, inbox_up):
    nodes = parse_sinfo(load("sinfo_idle.json"))
    parts = parse_partitions((DATA / fixture).read_text(), nodes)
    assert sorted(parts) == ["inbox", "main", "profiling", "research"]
    assert parts["inbox"].up is inbox_up
    assert parts["profiling"].up and parts["main"].up
    assert parts["research"].nodes == ("gpu3", "gpu4") and parts["research"].total_gpus == 16
    assert parts["main"].total_gpus == 32 and len(parts["profiling"].nodes) == 4


def test_partitions_edge_lines():
    nodes = parse_sinfo({"nodes": [{"name": "n1", "gres": "gpu:4", "partitions": ["a"]}]})
    text = ("PartitionName=a State=DRAIN Nodes=n1 TRES=cpu=4,gres/gpu=4\n\n"
            "garbage line without the key\n"
            "PartitionName=b State=INACTIVE\n"
            "PartitionName=c Nodes=n1\n")
    parts = parse_partitions(text, nodes)
    assert sorted(parts) == ["a", "b", "c"]
    assert not parts["a"].up and not parts["b"].up and parts["c"].up  # no State field: UP
    assert parts["a"].total_gpus == 4 and parts["b"].total_gpus == 0


def test_sinfo_node_states():
    data = {"nodes": [
        {"name": "d", "state": "down", "gres": "gpu:8"},
        {"name": "dr", "state": "idle", "state_flags": ["DRAIN"], "gres": "gpu:8"},
        {"name": "m", "state": ["MIXED"], "state_flags": [], "gres": "gpu:a100:4(S:0-1)",
         "gres_used": "gpu:a100:2(IDX:0-1)"},
        {"name": "", "state": "idle"},  # no name: skipped
        {"state": "idle"},
        {"name": "nr", "state": "idle", "state_flags": ["NOT_RESPONDING"], "gres": ""},
    ]}
    nodes = parse_sinfo(data)
    assert sorted(nodes) == ["d", "dr", "m", "nr"]
    assert not nodes["d"].usable and not nodes["dr"].usable and not nodes["nr"].usable
    assert nodes["m"].usable and (nodes["m"].gpus, nodes["m"].used) == (4, 2) and nodes["m"].state == "MIXED"
    assert nodes["nr"].gpus == 0
    assert parse_sinfo({}) == {} and parse_sinfo({"nodes": None}) == {}


# ----- sacct --json (real replies) --------------------------------------------------------------

def test_sacct_rows_real_reply():
    rows = {r["job_id"]: r for r in sacct_rows(load("sacct_finished.json"))}
    assert sorted(rows) == [1, 2, 4, 8, 9, 14, 16, 29, 43]
    r = rows[14]
    assert (r["name"], r["partition"], r["state"], r["gpus"]) == ("long-main", "main", "COMPLETED", 2)
    assert (r["submit_time"], r["start_time"], r["end_time"], r["elapsed_s"]) == (1795457614, 1795457616,
                                                                                  1795457636, 20)
    assert r["user"] == "root" and r["account"] == "root" and r["limit_min"] is None and r["array_job_id"] == 0
    assert rows[8]["gpus"] == 16
    assert rows[43]["limit_min"] == 525600
    # cancelled in the inbox before it started: no start, GPUs from the request
    assert rows[1]["state"] == "CANCELLED" and rows[1]["start_time"] is None and rows[1]["gpus"] == 2
    assert rows[2]["admin_comment"] == "lucid:partition=main" and rows[2]["comment"] == ""
    assert rows[9]["admin_comment"] == "lucid:partition=research"
    # slurmdbd rewrote the name (" -> `); lucidd takes what sacct says
    assert rows[1]["name"] == "x `dq` ✓"


def test_sacct_gpus_are_the_requested_count():
    rows = {r["job_id"]: r for r in sacct_rows(load("sacct_finished.json"))}
    assert rows[29]["gpus"] == 1


def test_sacct_nothing_found_reply():
    data = load("sacct_state_without_endtime.json")
    assert data["jobs"] == [] and data["errors"][0]["description"] == "Nothing found"
    assert sacct_rows(data) == []


def test_sacct_skips_a_bad_record_with_a_warning(caplog):
    good = load("sacct_finished.json")["jobs"][0]
    data = {"jobs": [{"name": "no id"}, {"job_id": "x1"}, good, {"job_id": 7, "tres": {"allocated": [{"count": "?"}]}}]}
    with caplog.at_level(logging.WARNING, logger="lucidd.slurm"):
        rows = sacct_rows(data)
    assert [r["job_id"] for r in rows] == [good["job_id"], 7]
    assert sum("sacct: skipped" in m for m in caplog.messages) == 2


# ----- GRES/TRES strings ------------------------------------------------------------------------

@pytest.mark.parametrize("spec,gpus", [
    ("", 0), (None, 0), ("gpu", 1), ("gpu:2", 2), ("gres:gpu:2", 2), ("gpu:0", 0), ("gpu:a100", 1),
    ("gpu:a100:4(S:0-1)", 4), ("gpu:a100:4(S:0-1),shard:8", 4), ("gpu:g0:1,gpu:g1:1", 2),
    ("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3)", 3), ("gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:3)", 3),
    ("gpu:(null):2(IDX:0-1)", 2), ("gpu:tesla-v100:2", 2), ("gres:gpu:a100:4", 4),
    ("shard:16", 0), ("mps:100", 0), ("gpu:8,shard:16", 8),
    ("gres/gpu=4", 4), ("cpu=1,mem=1000M,node=1,billing=1,gres/gpu=3", 3),
    ("gres/gpu=2,gres/gpu:a100=2", 2),  # the typed entry repeats the untyped total
    ("gres/gpu:a100=4", 0), ("gres/gpumem=80G", 0),
])
def test_gres_gpu_count(spec, gpus):
    assert gres_gpu_count(spec) == gpus


@pytest.mark.parametrize("rec,gpus", [
    ({"tres_req_str": "cpu=2,mem=2000M,node=2,billing=2,gres/gpu=16", "tres_per_node": "gres:gpu:8",
      "node_count": 2}, 16),
    ({"tres_req_str": "cpu=1,gres/gpu=3,gres/gpu:a100=3"}, 3),
    ({"tres_req_str": "cpu=1,mem=1G", "tres_per_job": "gres:gpu:5"}, 5),
    ({"tres_per_node": "gres:gpu:2", "node_count": 3}, 6),
    ({"tres_per_node": "gres:gpu:a100:4(S:0-1)", "node_count": None}, 4),
    ({"tres_per_node": "gpu:g0:1,gpu:g1:1"}, 2),
    ({"tres_req_str": "cpu=1,mem=1G,node=1"}, 0),
    ({}, 0),
])
def test_job_gpus(rec, gpus):
    assert job_gpus(rec) == gpus


# ----- hand-made job records --------------------------------------------------------------------

def test_record_missing_fields_gets_defaults():
    j = parse_job({"job_id": 5})
    assert (j.job_id, j.name, j.user, j.partition, j.gpus, j.nodes, j.cpus) == (5, "", "", "", 0, 1, 0)
    assert (j.submit_time, j.start_time, j.time_limit_s, j.restart_count, j.requeue) == (0, None, None, 0, True)
    assert j.requested_partition is None and not j.array_pending


def test_user_id_when_no_user_name():
    assert parse_job({"job_id": 1, "user_id": 1234}).user == "1234"


def test_newer_slurm_number_objects_and_state_lists():
    j = parse_job({"job_id": "12", "job_state": ["PENDING", "REQUEUED"], "time_limit": {"set": True, "infinite": False,
                                                                                         "number": 30},
                   "submit_time": {"set": True, "number": 1000}, "start_time": {"set": False, "number": 0},
                   "priority": {"set": True, "number": 77}, "node_count": {"set": True, "number": 2}})
    assert (j.job_id, j.state, j.time_limit_s, j.submit_time, j.start_time, j.priority, j.nodes) == (
        12, "PENDING", 1800, 1000, None, 77, 2)
    assert parse_job({"job_id": 1, "time_limit": {"set": True, "infinite": True, "number": 0}}).time_limit_s is None


def test_array_records():
    assert parse_job({"job_id": 64, "array_task_string": "1-1000", "array_task_id": None}).array_pending
    assert parse_job({"job_id": 64, "array_task_string": "2-9%2"}).array_pending
    assert not parse_job({"job_id": 65, "array_task_string": "", "array_task_id": 2}).array_pending


def test_array_of_separate_task_ids_is_an_array():
    assert parse_job({"job_id": 64, "array_task_string": "1,3,5", "array_task_id": None}).array_pending


def test_names_and_comments_kept_exactly():
    name = 'odd ;$(touch x) `id` \'q\' "dq" ünï ✓\ttab'
    comment = 'a\nb "c" lucid:noprofile ✓'
    j = parse_job({"job_id": 3, "name": name, "comment": comment, "admin_comment": "lucid:partition=main,research"})
    assert j.name == name and j.comment == comment
    assert j.requested_partition == "main,research" and j.opted_out_of_profiling


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_names_survive_the_runner_byte_for_byte(tmp_path, ensure_ascii):
    """Through a real subprocess, as slurmctld prints them (raw UTF-8 or \\u escapes)."""
    name = 'x "dq" ✓ ünï\nline2 `id` $(true) \\ back'
    reply = {"jobs": [{"job_id": 1, "name": name, "comment": "c\n✓", "job_state": "PENDING"}]}
    (tmp_path / "reply.json").write_text(json.dumps(reply, ensure_ascii=ensure_ascii), encoding="utf-8")
    fake = FakeSlurm(tmp_path / "bin")
    fake.prints("squeue", tmp_path / "reply.json")
    (j,) = parse_squeue(SlurmRunner(bin_dir=str(fake.bin)).run_json(["squeue", "--json"]))
    assert j.name == name and j.comment == "c\n✓"


@pytest.mark.parametrize("bad", [{"name": "no job id"}, {"job_id": "abc"}, {"job_id": None},
                                 {"job_id": 4, "tres_req_str": 5}])
def test_malformed_record_is_skipped_with_a_warning(caplog, bad):
    data = load("squeue_inbox.json")
    data["jobs"].insert(3, bad)
    with caplog.at_level(logging.WARNING, logger="lucidd.slurm"):
        jobs = parse_squeue(data)
    assert sorted(j.job_id for j in jobs) == list(range(9, 19))
    assert any("squeue: skipped a job record" in m for m in caplog.messages)


@pytest.mark.parametrize("bad", [None, "oops"])
def test_non_object_record_is_skipped(bad):
    data = load("squeue_inbox.json")
    data["jobs"].append(bad)
    assert len(parse_squeue(data)) == 10


def test_empty_replies():
    assert parse_squeue({}) == [] and parse_squeue({"jobs": None}) == [] and parse_squeue({"jobs": []}) == []


# ----- SlurmRunner against fake commands --------------------------------------------------------

@pytest.fixture
def fake(tmp_path):
    return FakeSlurm(tmp_path / "bin")


def test_runner_runs_an_argv_list_without_a_shell(fake):
    fake.script("scontrol", "echo ok")
    r = SlurmRunner(bin_dir=str(fake.bin))
    argv = ["scontrol", "update", "jobid=1", 'comment=a b;$(touch /tmp/x) "q" ✓', "*", ""]
    assert r.run(argv) == "ok\n"
    assert fake.calls() == [argv]
    assert r.calls == {"scontrol": 1} and not r.failures and r.seconds > 0


def test_runner_reads_json(fake):
    fake.prints("squeue", DATA / "squeue_inbox.json")
    r = SlurmRunner(bin_dir=str(fake.bin))
    data = r.run_json(["squeue", "--json"])
    assert len(data["jobs"]) == 10 and data["meta"]["Slurm"]["release"] == "22.05.8"


def test_a_reply_with_slurm_errors_is_a_transient_failure_not_an_empty_cluster(fake):
    """22.05's squeue --json exits 0 when slurmctld does not answer, with an error and no jobs: taken
    as a reply, every job lucidd knows would look gone (an admin trial saw records closed and
    profiling runs requeued after a controller restart)."""
    fake.prints("squeue", DATA / "squeue_no_controller.json")
    r = SlurmRunner(bin_dir=str(fake.bin))
    with pytest.raises(SlurmCommandError) as e:
        r.run_json(["squeue", "--json"])
    assert e.value.transient and "Failed while looking for jobs" in str(e.value) and "\n" not in str(e.value)
    fake.cluster(squeue="squeue_no_controller.json", sinfo="sinfo_busy.json")
    with pytest.raises(BackendError) as e:
        SlurmBackend(SlurmRunner(bin_dir=str(fake.bin))).snapshot()
    assert e.value.transient
    # sacct's "Nothing found" is an answer: a query with no match
    fake.prints("sacct", DATA / "sacct_state_without_endtime.json")
    assert r.run_json(["sacct", "--json"])["jobs"] == []


@pytest.mark.parametrize("reply", ['{"jobs": [', "", "Unable to parse", "[1, 2]", "null"])
def test_runner_malformed_json_is_transient(fake, tmp_path, reply):
    (tmp_path / "r").write_text(reply)
    fake.prints("squeue", tmp_path / "r")
    r = SlurmRunner(bin_dir=str(fake.bin))
    with pytest.raises(SlurmCommandError) as e:
        r.run_json(["squeue", "--json"])
    assert e.value.transient and "malformed JSON" in str(e.value)
    assert e.value.argv == ["squeue", "--json"]


def test_runner_timeout_is_transient(fake, tmp_path):
    mark = tmp_path / "mark"
    fake.script("squeue", f"echo started > {mark}; sleep 30; echo finished >> {mark}")
    r = SlurmRunner(bin_dir=str(fake.bin), timeout_s=0.5)
    with pytest.raises(SlurmCommandError) as e:
        r.run(["squeue", "--json"])
    assert mark.read_text() == "started\n"  # the runner gave up on the command: it never waited out its sleep
    assert e.value.transient and e.value.rc is None and "timed out after 0.5 s" in str(e.value)
    assert r.failures == {"squeue": 1} and r.calls == {"squeue": 1}
    with pytest.raises(SlurmCommandError, match="timed out after 0.2 s"):
        r.run(["squeue"], timeout_s=0.2)


@pytest.mark.parametrize("message,transient", [
    ("slurm_update error: Invalid job id specified", False),
    ("scontrol: error: Invalid job id specified", False),
    ("Requested operation is presently disabled for job 23", False),
    ("slurm_update error: Job has already finished", False),
    ("slurm_update error: Invalid partition name specified", False),
    ("slurm_update error: Access/permission denied", False),
    ("squeue: error: Unable to contact slurm controller (connect failure)", True),
    ("slurm_load_jobs error: Unable to contact slurm controller (connect failure)", True),
    ("sacct: error: Problem talking to the database: Connection refused", True),
    ("slurm_update error: Socket timed out on send/recv operation", True),
    ("", True),
])
def test_runner_failure_is_classified(fake, message, transient):
    fake.fails("scontrol", message)
    r = SlurmRunner(bin_dir=str(fake.bin))
    with pytest.raises(SlurmCommandError) as e:
        r.run(["scontrol", "requeue", "23"])
    err = e.value
    assert err.transient is transient and err.rc == 1
    assert err.slurm_message == message
    assert str(err) == f"scontrol requeue 23: {message or 'exit 1'}"
    assert r.failures == {"scontrol": 1}


def test_classify():
    assert classify("Invalid job id specified") is False
    assert classify("Unable to contact slurm controller (connect failure)") is True
    assert classify("UNABLE TO CONTACT SLURM CONTROLLER") is True
    assert classify("") is True and classify(None) is True
    assert classify("something nobody has seen") is False
    # a permanent phrase wins over a transient one in the same message
    assert classify("Invalid job id specified (slurm_receive_msg)") is False


def test_runner_message_is_one_line_and_bounded(fake):
    fake.script("scontrol", "printf 'line1\\n  line2\\n' >&2; head -c 2000 /dev/zero | tr '\\0' x >&2; exit 2")
    with pytest.raises(SlurmCommandError) as e:
        SlurmRunner(bin_dir=str(fake.bin)).run(["scontrol", "show", "partition", "x", "y"])
    assert e.value.slurm_message.startswith("line1 line2 xxx") and len(e.value.slurm_message) == 500
    assert str(e.value).startswith("scontrol show partition ...: line1") and e.value.rc == 2


def test_runner_uses_stdout_when_stderr_is_empty(fake):
    fake.script("scontrol", "echo 'Invalid job id specified'; exit 1")
    with pytest.raises(SlurmCommandError) as e:
        SlurmRunner(bin_dir=str(fake.bin)).run(["scontrol", "requeue", "1"])
    assert not e.value.transient and e.value.slurm_message == "Invalid job id specified"


def test_runner_counters_over_several_calls(fake):
    fake.script("squeue", "echo '{}'")
    fake.fails("scontrol", "Invalid job id specified")
    r = SlurmRunner(bin_dir=str(fake.bin))
    for _ in range(3):
        r.run_json(["squeue", "--json"])
    for _ in range(2):
        with pytest.raises(SlurmCommandError):
            r.run(["scontrol", "requeue", "1"])
    assert r.calls == {"squeue": 3, "scontrol": 2} and r.failures == {"scontrol": 2}


def test_runner_missing_command_is_permanent(fake, tmp_path):
    r = SlurmRunner(bin_dir=str(fake.bin))
    with pytest.raises(BackendError) as e:
        r.run(["squeue", "--json"])
    assert e.value.transient is False and "squeue not found in [slurm] bin_dir" in str(e.value)
    (fake.bin / "sinfo").write_text("#!/bin/sh\necho hi\n")  # not executable
    with pytest.raises(BackendError, match="sinfo not found"):
        r.run(["sinfo"])
    assert not r.calls


def test_runner_missing_command_on_path_is_permanent(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendError) as e:
        SlurmRunner().run(["squeue", "--json"])
    assert e.value.transient is False and "not found on PATH" in str(e.value)


@pytest.mark.parametrize("argv", [[], ["squeue", 1], ["squeue", None], None])
def test_runner_refuses_anything_but_a_list_of_strings(fake, argv):
    with pytest.raises(ValueError):
        SlurmRunner(bin_dir=str(fake.bin)).run(argv)


def test_runner_passes_its_env(fake):
    fake.script("squeue", 'printf "%s" "$SLURM_CONF"')
    r = SlurmRunner(bin_dir=str(fake.bin), env={"SLURM_CONF": "/etc/slurm/test.conf", "PATH": "/usr/bin:/bin"})
    assert r.run(["squeue"]) == "/etc/slurm/test.conf"


# ----- SlurmBackend: the commands it sends ------------------------------------------------------

def test_snapshot_is_one_call_of_each(fake):
    fake.cluster(squeue="squeue_running.json", sinfo="sinfo_busy.json")
    b = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin)), clock=lambda: 1795457660.7)
    snap = b.snapshot()
    assert snap.now == 1795457660 and len(snap.jobs) == 8 and snap.job(25).gpus == 16 and snap.job(99) is None
    assert snap.partitions["inbox"].up is False and snap.nodes["gpu2"].used == 4
    assert fake.calls() == [["squeue", "--json"], ["sinfo", "--json"], ["scontrol", "-o", "show", "partition"]]
    assert b.call_counts() == {"squeue": 1, "sinfo": 1, "scontrol": 1}


def test_a_begin_time_ahead_is_seen_before_slurm_says_begintime(fake, tmp_path):
    """Right after a slurmctld restart a `--begin=now+1hour` job in the inbox said PartitionDown, not
    BeginTime, and was admitted to profiling (a review on a test cluster). Its begin time (squeue's
    eligible_time) says it; a job submitted a moment after lucidd read its clock is no --begin job."""
    import json as _json

    data = _json.loads((DATA / "squeue_inbox.json").read_text())
    by_id = {j["job_id"]: j for j in data["jobs"]}
    submit = by_id[11]["submit_time"]
    by_id[11]["eligible_time"] = submit + 3600  # --begin=now+1hour
    by_id[12]["submit_time"] = by_id[12]["eligible_time"] = submit + 5  # after the clock was read
    (tmp_path / "squeue.json").write_text(_json.dumps(data))
    fake.cluster()
    fake.prints("squeue", tmp_path / "squeue.json")
    snap = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin)), clock=lambda: submit + 1).snapshot()
    assert snap.job(11).reason == "PartitionDown" and snap.job(11).waits_for_begin_time
    assert snap.job(11).begin_time == submit + 3600
    assert not snap.job(12).waits_for_begin_time and not snap.job(13).waits_for_begin_time


def test_write_commands(fake):
    fake.cluster()
    b = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin)))
    b.move([11, "12"], "profiling")
    b.move([14], "main,research", start_now=True)
    b.move([15, 16], "profiling", exclude="gpu3,gpu4")
    b.move([15], "main", start_now=True, exclude="")
    b.requeue(14)
    b.signal(14, "USR1", True)
    b.signal(15, "USR2", False)
    b.set_site_factor([33, 34], 999_000_000)
    b.set_partition_up("inbox", True)
    b.set_partition_up("inbox", False)
    assert fake.calls() == [
        ["scontrol", "update", "jobid=11,12", "partition=profiling"],
        ["scontrol", "update", "jobid=14", "partition=main,research", "starttime=now"],
        ["scontrol", "update", "jobid=15,16", "partition=profiling", "excnodelist=gpu3,gpu4"],
        ["scontrol", "update", "jobid=15", "partition=main", "starttime=now", "excnodelist="],
        ["scontrol", "requeue", "Incomplete", "14"],
        ["scancel", "--signal=USR1", "--batch", "14"],
        ["scancel", "--signal=USR2", "15"],
        ["scontrol", "update", "jobid=33,34", "sitefactor=999000000"],
        ["scontrol", "update", "partitionname=inbox", "state=UP"],
        ["scontrol", "update", "partitionname=inbox", "state=DOWN"],
    ]


def test_job_ids_must_be_integers(fake):
    fake.cluster()
    b = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin)))
    with pytest.raises(ValueError):
        b.move(["12;rm -rf /"], "main")
    with pytest.raises(ValueError):
        b.requeue("1 2")
    with pytest.raises(ValueError):
        b.signal(1, "KILL", False)
    assert fake.calls() == []


@pytest.mark.parametrize("value", [SITE_FACTOR_MIN - 1, 0, -5, -2147483645, SITE_FACTOR_MAX + 1, 2 ** 40])
def test_set_site_factor_refuses_values_outside_the_range(fake, value):
    fake.cluster()
    b = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin)))
    with pytest.raises(ValueError, match="outside 2..2147483645"):
        b.set_site_factor([1], value)
    assert fake.calls() == []  # refused before Slurm (which takes garbage silently)


@pytest.mark.parametrize("value", [SITE_FACTOR_MIN, SITE_FACTOR_MAX, "1000", 7.9])
def test_set_site_factor_accepts_the_range(fake, value):
    fake.cluster()
    SlurmBackend(SlurmRunner(bin_dir=str(fake.bin))).set_site_factor([5], value)
    assert fake.calls() == [["scontrol", "update", "jobid=5", f"sitefactor={int(value)}"]]


def test_site_factor_bounds_are_slurms():
    assert (SITE_FACTOR_MIN, SITE_FACTOR_MAX) == (2, 2147483645)


def _sacct_as_22_05(fake):
    """A fake sacct that answers as the real 22.05 one did on the test cluster: with --state but no
    --endtime, 'Nothing found' (data/sacct_state_without_endtime.json); otherwise the finished jobs."""
    fake.script("sacct", 'state=0; end=0\nfor a in "$@"; do case "$a" in --state|--state=*|-s) state=1;; '
                '--endtime|--endtime=*|-E) end=1;; esac; done\n'
                f'if [ $state = 1 ] && [ $end = 0 ]; then cat {DATA / "sacct_state_without_endtime.json"}; '
                f'else cat {DATA / "sacct_finished.json"}; fi')


def test_finished_jobs_finds_the_jobs_sacct_22_05_has(fake):
    """HEAD 74fe43b ran `sacct ... --starttime T --state CD,F,...` without --endtime, which finds nothing
    on 22.05 (the captured reply), so lucidd's history stayed empty."""
    _sacct_as_22_05(fake)
    rows = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin))).finished_jobs(1795457000)
    assert sorted(r["job_id"] for r in rows) == [1, 2, 4, 8, 9, 14, 16, 29, 43]
    (call,) = fake.calls()
    assert call[:4] == ["sacct", "--json", "--allusers", "--starttime"]
    assert time.strptime(call[4], "%Y-%m-%dT%H:%M:%S")
    assert all(r["end_time"] for r in rows)


def test_transient_failure_reaches_the_caller(fake):
    fake.fails("squeue", "squeue: error: Unable to contact slurm controller (connect failure)")
    b = SlurmBackend(SlurmRunner(bin_dir=str(fake.bin)))
    with pytest.raises(SlurmCommandError) as e:
        b.snapshot()
    assert e.value.transient and isinstance(e.value, BackendError)


def test_finished_jobs_in_a_window_asks_sacct_for_its_end(fake):
    _sacct_as_22_05(fake)
    SlurmBackend(SlurmRunner(bin_dir=str(fake.bin))).finished_jobs(1795457000, 1795460600)
    (call,) = fake.calls()
    assert call[5] == "--endtime" and time.strptime(call[6], "%Y-%m-%dT%H:%M:%S")
