"""lucidd against a real slurmctld/slurmd/slurmdbd (and PostgreSQL): what issue 10 must show.

Times are compressed (Tprof 8 s, a reconcile every second); everything else is as deployed:
job_submit.lua routes jobs to the DOWN inbox, lucidd runs as its own process, jobs are plain
`sbatch` sleep jobs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from lucidd.live.reconcile import heartbeat_age
from lucidd.live.store import Store, StoreError

from .conftest import (TC, active_jobs, failopen, partition_up, sacct_runs, sbatch, sh, squeue, wait_until,
                       write_config)

pytestmark = pytest.mark.slurm


def _runs_ok(runs, job_id):
    assert all(state != "FAILED" for _, state, _ in runs[job_id]), runs[job_id]


def _until_tables(read):
    """`read` as a wait_until predicate on lucidd's database: False until lucidd has created its tables."""
    def pred():
        try:
            return read()
        except StoreError:
            return False
    return pred


def test_profiling_route_skips_and_history(clean_cluster, tmp_path, job_script, lucidd_factory):
    # Tprof 12 s, not 8: eight jobs start in one second on a 2-core CI machine, and a 2 s job must
    # end well inside Tprof to count as a short one
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", profiler={"tprof_s": 12})
    daemon = lucidd_factory(cfg).start()
    short = [sbatch(job_script, 2, f"--gres=gpu:{g}", name=f"short{g}") for g in (1, 2, 4)]
    long_main = sbatch(job_script, 20, "--gres=gpu:2", "-t", "30", name="long-main")  # a limit of its own
    long_research = sbatch(job_script, 20, "-p", "research", "--gpus=1", name="long-research")
    no_requeue = sbatch(job_script, 4, "--no-requeue", "--gres=gpu:1", name="no-requeue")
    big = sbatch(job_script, 4, "-N", "2", "--gres=gpu:8", name="big16")
    opted_out = sbatch(job_script, 3, "--gres=gpu:1", "--comment", "lucid:noprofile please", name="optout")
    ids = [*short, long_main, long_research, no_requeue, big, opted_out]
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in ids], 150, "all jobs to finish")
    time.sleep(3)  # one more reconcile records the last ends and reads sacct
    runs = sacct_runs(ids)
    for j in ids:
        _runs_ok(runs, j)
    for j in short:  # ended inside Tprof: never reached main
        assert [r[:2] for r in runs[j]] == [("profiling", "COMPLETED")], runs[j]
    for j, part in ((long_main, "main"), (long_research, "research")):  # restarted once, in their own partition
        assert [r[:2] for r in runs[j]] == [("profiling", "REQUEUED"), (part, "COMPLETED")], runs[j]
        out = (tmp_path / f"{j}.out").read_text()
        assert "part=profiling restarts=0" in out and f"part={part} restarts=1" in out  # JobFileAppend=1
    for j in (no_requeue, big, opted_out):  # skipped profiling
        assert [r[:2] for r in runs[j]] == [("main", "COMPLETED")], runs[j]
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    # lucidd reads sacct every history_interval_s (2 s here); slurmdbd lags slurmctld a little
    wait_until(lambda: {long_main, long_research} <= {h.job_id for h in store.history(0)}, 30,
               "lucidd to read the finished jobs from sacct")
    assert daemon.stop() == 0
    assert partition_up("inbox"), "an orderly stop opens the inbox"

    rows = store.jobs(ids)
    assert rows[long_main].profile == "released" and rows[long_main].requeued_at
    assert rows[short[0]].profile == "finished" and "never reached" in rows[short[0]].profile_reason
    # --no-requeue: job_submit.lua (version 8) leaves it in main, where lucidd first sees it
    assert rows[no_requeue].profile_reason == "first seen in partition main", rows[no_requeue].profile_reason
    assert "Nprof" in rows[big].profile_reason
    assert "lucid:noprofile" in rows[opted_out].profile_reason
    # each action once: profile/requeue/release keys are unique and applied
    requeues = [a for j in ids for a in store.actions_for(j) if a.kind == "requeue"]
    assert sorted(a.job_id for a in requeues) == sorted([long_main, long_research])
    # history for the models: sacct's rows with lucidd's original submit time (Slurm resets it on requeue)
    hist = {h.job_id: h for h in store.history(0)}
    assert long_main in hist and hist[long_main].submit_time == rows[long_main].original_submit
    assert hist[long_main].partition == "main"
    # one decision path: every recorded live cycle replays to the same decisions in the simulator's objects
    from orchestrator.live import replay_recorded

    recorded = [json.loads(c.recorded) for c in store.recorded_cycles()]
    assert any(r["decisions"]["profile"] for r in recorded) and any(r["decisions"]["site_factors"] for r in recorded)
    # the TimeLimit squeue reports reaches the decision (estimates are capped at it) and its record
    seen = {d["job_id"]: d.get("time_limit_s") for r in recorded for k in ("inbox", "profiling", "waiting")
            for d in r[k]}
    assert seen.get(long_main) == 1800, seen
    for r in recorded:
        again = replay_recorded(r)
        assert again["site_factors"] == r["decisions"]["site_factors"]
        assert sorted(again["profile"]) == sorted(r["decisions"]["profile"])
        assert again["profile"] == sorted(again["profile"], key=lambda jid: next(
            (d["gpus"], d["job_id"]) for d in r["inbox"] if d["job_id"] == jid))


def test_lucid_order_as_sitefactor(clean_cluster, tmp_path, job_script, lucidd_factory):
    """Pending jobs start in Lucid's order (estimate x GPUs; same estimate here, so fewer GPUs first)."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start()
    # 20 s: the blocker must outlast lucidd's release of all four jobs (maybe over two cycles)
    blocker = sbatch(job_script, 20, "-w", "gpu1", "--exclusive", "--gres=gpu:8", "--comment", "lucid:noprofile",
                     name="blocker")
    wait_until(lambda: any(j["job_id"] == blocker and j["job_state"] == "RUNNING" for j in squeue()), 30,
               "the blocker to run")
    order = [8, 1, 4, 2]
    ids = {sbatch(job_script, 1, "-w", "gpu1", "--exclusive", f"--gres=gpu:{g}", "--comment", "lucid:noprofile",
                  name=f"o{g}"): g for g in order}
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in ids or j["job_id"] == blocker], 120,
               "ordered jobs to finish")
    runs = sacct_runs(list(ids))
    started = sorted(ids, key=lambda j: (runs[j][-1][2], j))
    daemon.stop()
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    rows = store.jobs(list(ids))
    # Slurm started them exactly in lucidd's SiteFactor order ...
    assert started == sorted(ids, key=lambda j: -rows[j].site_factor), {ids[j]: runs[j] for j in ids}
    # ... which is Lucid's: estimate x GPUs, smallest first (estimates here come from the finished
    # jobs sacct reported, same-GPU-count means, or the 1 h default on a fresh cluster)
    size = {j: rows[j].estimate_s * ids[j] for j in ids}
    assert sorted(ids, key=lambda j: -rows[j].site_factor) == sorted(ids, key=lambda j: (size[j], j))
    assert all(2 <= rows[j].site_factor <= 2147483645 for j in ids)
    assert all("estimate x GPUs" in rows[j].order_reason for j in ids)


def test_a_priority_pinned_by_hand_is_said_and_a_hold_and_release_gives_it_back(clean_cluster, tmp_path, job_script,
                                                                                 lucidd_factory):
    """`scontrol update jobid=N priority=5` takes a job out of lucidd's order for good (Slurm then
    ignores SiteFactor): lucidd says so in its log and the job's order reason; `scontrol hold N;
    scontrol release N` unpins it, and the reason is lucidd's again."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start().started()
    blocker = sbatch(job_script, 120, "-w", "gpu1", "--exclusive", "--gres=gpu:8", name="blocker")
    job = sbatch(job_script, 1, "-w", "gpu1", "--gres=gpu:1", "--comment", "lucid:noprofile", name="pinned")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")

    def reason():
        r = store.job(job)
        return (r.order_reason or "") if r is not None and r.site_factor else None

    wait_until(lambda: reason() and "estimate x GPUs" in reason(), 30, "lucidd to order the job")
    sh("scontrol", "update", f"jobid={job}", "priority=5")
    wait_until(lambda: reason().startswith("pinned by hand at priority 5"), 30, "the pin to be noticed")
    assert "scontrol hold" in reason() and "below the SiteFactor" in daemon.text()
    sh("scontrol", "hold", str(job))
    sh("scontrol", "release", str(job))
    wait_until(lambda: "estimate x GPUs" in reason(), 30, "the job back in lucidd's order")
    assert "back in lucidd's order" in daemon.text()
    assert next(j for j in squeue() if j["job_id"] == job)["priority"] == store.job(job).site_factor
    sh("scancel", str(blocker), str(job))
    daemon.stop()


def test_kill9_failopen_then_resume_without_second_requeue(clean_cluster, tmp_path, job_script, lucidd_factory):
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start()
    first = [sbatch(job_script, 25, "--gres=gpu:1", name=f"long{k}") for k in range(3)]
    # wait until lucidd has requeued and released at least one of them
    wait_until(lambda: any(j["job_id"] in first and j["partition"] == "main" and j["job_state"] == "RUNNING"
                           for j in squeue()), 60, "a profiled job to run in main")
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(10)
    later = [sbatch(job_script, 3, "--gres=gpu:1", name=f"late{k}") for k in range(2)]
    later.append(sbatch(job_script, 3, "-p", "research", "--gres=gpu:1", name="late-research"))

    # the systemd timer's job: run lucidd-failopen every second until it has opened the inbox
    heartbeat = str(tmp_path / "state" / "heartbeat")
    calls = []  # (heartbeat age just before the call, just after it, inbox UP after it)

    def opened():
        before = heartbeat_age(heartbeat)
        r = failopen(cfg)
        after = heartbeat_age(heartbeat)
        assert r.returncode == 0, r.stderr
        calls.append((before, after, partition_up("inbox")))
        return calls[-1][2]

    wait_until(opened, 30, "lucidd-failopen to open the inbox", step=1)
    # It opens at the first call after the heartbeat passed failopen_after_s (6 s in write_config),
    # not before. lucidd-failopen reads the age after `before` was read and before `after` was: a
    # call that left the inbox shut read at most 6 s, so its `before` <= 6; the call that opened it
    # read more than 6 s, so its `after` > 6. No margin is needed: this is order, not speed.
    assert all(before is not None and before <= 6 for before, _, _ in calls[:-1]), calls
    assert calls[-1][1] is None or calls[-1][1] > 6, calls
    wait_until(lambda: not [j for j in squeue() if j["partition"] == "inbox" and j["job_state"] == "PENDING"], 20,
               "no job left waiting in the inbox")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in later], 60, "late jobs to finish")
    runs = sacct_runs(later)
    assert runs[later[2]][-1][0] == "research", "fail-open releases a job to the partition it asked for"
    # restart lucidd: it closes the inbox and resumes from its database
    daemon2 = lucidd_factory(cfg, log_name="lucidd2.log").start()
    wait_until(lambda: not partition_up("inbox"), 30, "lucidd to close the inbox again")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in first], 120, "first jobs to finish")
    daemon2.stop()
    runs = sacct_runs(first)
    for j in first:
        _runs_ok(runs, j)
        assert sum(1 for r in runs[j] if r[1] == "REQUEUED") <= 1, runs[j]
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    for j in first:
        assert len([a for a in store.actions_for(j) if a.kind == "requeue"]) <= 1


def test_slurmctld_restart_while_lucidd_runs(clean_cluster, tmp_path, job_script, lucidd_factory):
    # room_wait_s 120: just after a restart slurmctld may call nodes unavailable for ~10 s; this test
    # is about surviving the restart, not about the wait for profiling room (2 x Tprof, 16 s)
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", slurm={"command_timeout_s": 5.0,
                                                                             "default_partition": "main"},
                       profiler={"room_wait_s": 120})
    daemon = lucidd_factory(cfg).start()
    time.sleep(2)
    # A profiling run that ends while slurmctld is down, past Tprof (8 s) when it is back: slurmctld
    # shows it RUNNING until the node's completion message arrives, and a requeue then ran the
    # finished job a second time (an admin trial, 5 of 5 jobs).
    ended_inside = sbatch(job_script, 5, "--gres=gpu:1", name="ends-while-ctld-down")
    wait_until(lambda: [j for j in active_jobs() if j["job_id"] == ended_inside and j["job_state"] == "RUNNING"
                        and j["partition"] == "profiling"], 30, "the job to run in profiling")
    stopped = time.time()
    sh(str(TC), "ctld-stop")
    try:
        wait_until(lambda: "Slurm did not answer" in daemon.text(), 60, "lucidd to notice slurmctld is gone")
        time.sleep(max(3.0, 12 - (time.time() - stopped)))  # the run ends meanwhile and is past Tprof
        assert daemon.proc.poll() is None, "lucidd must wait for slurmctld, not exit"
    finally:
        sh(str(TC), "ctld-start", timeout=120)
    job = sbatch(job_script, 2, "--gres=gpu:1", name="after-restart")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in (job, ended_inside)], 90,
               "the jobs to finish")
    runs = sacct_runs([job, ended_inside])
    assert runs[job][-1][:2] == ("profiling", "COMPLETED")
    assert [r[:2] for r in runs[ended_inside]] == [("profiling", "COMPLETED")], runs[ended_inside]
    daemon.stop()
    assert "Slurm did not answer" in daemon.text()


def _fresh_pg_database(base_url: str, name: str) -> str:
    import psycopg

    plain = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name}")
        c.execute(f"CREATE DATABASE {name}")
    return base_url.rsplit("/", 1)[0] + "/" + name


def test_postgres_down_opens_inbox_and_resumes(clean_cluster, tmp_path, job_script, lucidd_factory):
    url = _fresh_pg_database(clean_cluster["LUCIDD_TEST_PG_URL"], f"lucidd_t{os.getpid()}")
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", db_url=url)
    daemon = lucidd_factory(cfg).start()
    wait_until(lambda: not partition_up("inbox") and "started" in daemon.text(), 30, "lucidd on PostgreSQL")
    sh(str(TC), "pg-stop")
    try:
        wait_until(lambda: partition_up("inbox"), 30, "lucidd to open the inbox when its database is gone")
        assert "database unavailable" in daemon.text()
        job = sbatch(job_script, 2, "--gres=gpu:1", name="db-down")
        wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 60, "a job to run without the database")
        assert daemon.proc.poll() is None
    finally:
        sh(str(TC), "pg-start", timeout=120)
    wait_until(lambda: not partition_up("inbox"), 40, "lucidd to resume and close the inbox")
    assert "database is back" in daemon.text()
    job = sbatch(job_script, 2, "--gres=gpu:1", name="db-back")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 60, "a job after the database is back")
    assert sacct_runs([job])[job][-1][:2] == ("profiling", "COMPLETED")
    wait_until(lambda: Store(url).job(job).profile == "finished", 20, "lucidd to record the job's end")
    # the outage wrote no cycle rows; status shows it from what lucidd recorded when it came back
    from lucidd.admin_cli import status_data
    from lucidd.live.config import load_config

    outage = status_data(load_config(cfg), Store(url))["last_database_outage"]
    assert outage and outage["seconds"] > 0 and outage["to"] > outage["from"], outage
    daemon.stop()


def test_a_job_that_would_start_at_once_skips_profiling(clean_cluster, tmp_path, job_script, lucidd_factory):
    """lucidd's default ([profiler] skip_when_free): on an idle cluster a job goes straight to its
    partition and runs once there, without the profiling restart."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", profiler={"skip_when_free": True})
    daemon = lucidd_factory(cfg).start()
    job = sbatch(job_script, 12, "--gres=gpu:1", name="idle")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 90, "the job to finish")
    runs = sacct_runs([job])
    assert [r[:2] for r in runs[job]] == [("main", "COMPLETED")], runs[job]  # 12 s > Tprof 8 s, yet no restart
    time.sleep(2)
    daemon.stop()
    row = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}").job(job)
    assert row.profile == "skipped" and "would start at once" in row.profile_reason, row


def test_a_job_admitted_to_profiling_that_cannot_start_there_goes_to_its_partition(clean_cluster, tmp_path, job_script,
                                                                                  lucidd_factory):
    """Every GPU is held by unprofiled jobs, so a job admitted to profiling waits there; past 2 x
    Tprof lucidd moves it to its partition unprofiled, where it runs once (no profiling restart)."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start().started()
    nodes = [f"gpu{i}" for i in range(1, 5)]  # the test cluster's 4 nodes x 8 GPUs (scripts/testcluster.sh)
    # 60 s: they must outlast the withdrawal at 2 x Tprof after lucidd first sees the job (~17 s)
    # by a margin a loaded machine cannot eat, or the job starts in profiling after all
    blockers = [sbatch(job_script, 60, "-w", n, "--exclusive", "--gres=gpu:8", "--comment", "lucid:noprofile",
                       name=f"block-{n}") for n in nodes]
    wait_until(lambda: sum(j["job_id"] in blockers and j["job_state"] == "RUNNING" for j in squeue()) == len(blockers),
               60, "the blockers to hold every GPU")
    job = sbatch(job_script, 4, "--gres=gpu:1", name="waits")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    wait_until(lambda: (r := store.job(job)) is not None and r.profile == "admitted", 30, "the job's admission")
    wait_until(lambda: store.job(job).profile == "skipped", 40, "lucidd to withdraw it from profiling")
    assert any(j["job_id"] == job and j["job_state"] == "PENDING" for j in squeue())  # blockers still run
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in [job, *blockers]], 120, "all jobs to finish")
    runs = sacct_runs([job])
    daemon.stop()
    assert [r[:2] for r in runs[job]] == [("main", "COMPLETED")], runs[job]
    row = store.job(job)
    assert "admitted to profiling" in row.profile_reason and row.profile_start is None, row


def _research_full_with_a_waiter(job_script, fill_s: int) -> tuple[list, int]:
    """research (gpu3-4) full with two 8-GPU jobs of `fill_s` seconds and an 8-GPU job waiting there:
    a research job admitted to profiling is then lent main's idle GPUs."""
    fill = [sbatch(job_script, fill_s, "-p", "research", "--gres=gpu:8", "--comment", "lucid:noprofile",
                   name=f"fill{i}") for i in (1, 2)]
    wait_until(lambda: sum(j["job_id"] in fill and j["job_state"] == "RUNNING" for j in squeue()) == 2, 60,
               "research's two nodes to be full")
    waiter = sbatch(job_script, 5, "-p", "research", "--gres=gpu:8", "--comment", "lucid:noprofile", name="waiter")
    wait_until(lambda: any(j["job_id"] == waiter and j["partition"] == "research" for j in squeue()), 30,
               "a job waiting in research")
    return fill, waiter


def test_profiling_borrows_only_gpus_nobody_waits_for(clean_cluster, tmp_path, job_script, lucidd_factory):
    """[profiler] lend_idle_gpus: research (gpu3-4) is full with a job waiting, main (gpu1-4) has
    nobody waiting. A research job admitted to profiling is kept off gpu3-4 with ExcNodeList and runs
    on gpu1-2, whose GPUs nobody waits for; after its requeue it goes to research with the ExcNodeList
    cleared (so research's own nodes can run it), and runs there once."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", profiler={"capacity_gpus": 0,
                                                                              "lend_idle_gpus": True})
    daemon = lucidd_factory(cfg).start()
    fill, waiter = _research_full_with_a_waiter(job_script, 45)
    probe = sbatch(job_script, 60, "-p", "research", "--gres=gpu:1", name="probe")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")

    def probe_job():
        return next((j for j in squeue() if j["job_id"] == probe), None)

    # the squeue record that showed it running (a second read could already see it requeued at Tprof)
    j = wait_until(lambda: (j := probe_job()) is not None and j["partition"] == "profiling"
                   and j["job_state"] == "RUNNING" and j, 30, "the probe to run in profiling")
    assert j["excluded_nodes"] == "gpu3,gpu4", j["excluded_nodes"]
    assert j["nodes"] in ("gpu1", "gpu2"), j["nodes"]
    # lucidd saves its row just after Slurm has already started the job
    row = wait_until(lambda: (r := store.job(probe)) is not None and r.profile != "pending" and r, 10,
                     "lucidd to record the admission")
    assert row.profile == "admitted" and "nobody waits" in row.profile_reason, row.profile_reason
    # Tprof (8 s): requeued, then released to research with its ExcNodeList cleared
    wait_until(lambda: (j := probe_job()) is not None and j["partition"] == "research", 40, "the probe's release")
    assert probe_job()["excluded_nodes"] in ("", None), probe_job()
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in [probe, waiter, *fill]], 200, "all jobs to finish")
    runs = sacct_runs([probe])
    daemon.stop()
    assert [r[:2] for r in runs[probe]] == [("profiling", "REQUEUED"), ("research", "COMPLETED")], runs[probe]
    release = [a for a in store.actions_for(probe) if a.kind == "release"]
    assert release and json.loads(release[0].args).get("excnodelist") == "", release


def test_gpus_a_job_waits_for_in_a_list_of_partitions_are_not_lent(clean_cluster, tmp_path, job_script,
                                                                   lucidd_factory):
    """A job submitted with `-p main,research` waits in both (Slurm shows "main,research"): main's
    idle GPUs are not lent to profiling while it waits. research (gpu3-4) is full with a job
    waiting; gpu1 and gpu2 hold one GPU each, so the 8-GPU list job fits nowhere. A research probe
    finds nothing to borrow and is admitted within the profiling capacity, not lent (no
    ExcNodeList). Before 2 December 2026 the list was one partition name no node had: gpu1-2
    counted as nobody's, and the probe was lent them."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state",
                       profiler={"capacity_gpus": 0, "lend_idle_gpus": True})
    daemon = lucidd_factory(cfg).start()
    fill, waiter = _research_full_with_a_waiter(job_script, 150)
    one = [sbatch(job_script, 150, "-p", "main", "--gres=gpu:1", "-w", node, "--comment", "lucid:noprofile",
                  name=f"one-{node}") for node in ("gpu1", "gpu2")]
    wait_until(lambda: sum(j["job_id"] in one and j["job_state"] == "RUNNING" for j in squeue()) == 2, 60,
               "one GPU busy on each of gpu1 and gpu2")
    wide = sbatch(job_script, 5, "-p", "main,research", "--gres=gpu:8", "--comment", "lucid:noprofile", name="wide")
    wait_until(lambda: any(j["job_id"] == wide and j["partition"] == "main,research" and j["job_state"] == "PENDING"
                           for j in squeue()), 30, "the list job waiting in main,research")
    probe = sbatch(job_script, 60, "-p", "research", "--gres=gpu:1", name="probe")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    row = wait_until(lambda: (r := store.job(probe)) is not None and r.phase != "inbox" and r, 60,
                     "lucidd to send the probe on")
    # admitted within the profiling capacity (runs there use any node), not lent main's GPUs
    assert not row.lent and "nobody waits for" not in (row.profile_reason or ""), (row.lent, row.profile_reason)
    assert row.profile_reason.startswith("profiling: 1 GPU(s)"), row.profile_reason
    assert (next(j for j in squeue() if j["job_id"] == probe).get("excluded_nodes") or "") == ""
    for jid in (probe, wide, waiter, *one, *fill):
        sh("scancel", str(jid))
    daemon.stop()


def test_a_lent_run_is_kept_until_a_job_of_its_nodes_has_waited_long_tprof(clean_cluster, tmp_path, job_script,
                                                                            lucidd_factory):
    """[profiler] keep_lent_while_idle, long_tprof_s 20 s: a research job lent main's GPUs (research
    full, a job waiting there) runs on past its 20 s while nobody waits in main. Then main gets a job
    that cannot start (the probe holds a GPU of the only node it could use): lucidd requeues the probe
    once that job has waited 20 s since its submission, not before, and the job starts on its GPUs."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state",
                       profiler={"capacity_gpus": 0, "lend_idle_gpus": True, "long_tprof_s": 20,
                                 "keep_lent_while_idle": True})
    daemon = lucidd_factory(cfg).start()
    fill, waiter = _research_full_with_a_waiter(job_script, 150)
    probe = sbatch(job_script, 150, "-p", "research", "--gres=gpu:1", name="probe")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")

    def job(jid):
        return next((j for j in squeue() if j["job_id"] == jid), None)

    j = wait_until(lambda: (j := job(probe)) is not None and j["partition"] == "profiling"
                   and j["job_state"] == "RUNNING" and j, 30, "the probe to run in profiling, lent")
    probe_node = j["nodes"]
    assert probe_node in ("gpu1", "gpu2") and j["excluded_nodes"] == "gpu3,gpu4", j
    started = wait_until(lambda: (r := store.job(probe)) is not None and r.profile_start is not None and r, 10,
                         "lucidd to record the probe's start")
    wait_until(lambda: time.time() - started.profile_start > 35, 60, "the probe to pass its 20 s Tprof")
    assert job(probe)["partition"] == "profiling" and job(probe)["job_state"] == "RUNNING", job(probe)
    assert not [a for a in store.actions_for(probe) if a.kind == "requeue"], "requeued with nobody waiting"
    from lucidd.admin_cli import explain_data
    from lucidd.live.config import load_config

    # no action says it is kept (only the reclaim will): `lucidctl explain` does
    story = explain_data(load_config(cfg), store, probe)["story"]
    assert any("past its Tprof 20 s: kept there" in line for line in story), story
    # main: one 8-GPU job takes the other free node; a second can only use the probe's node, and waits
    other = sbatch(job_script, 150, "-p", "main", "--gres=gpu:8", "--comment", "lucid:noprofile", name="other")
    wait_until(lambda: (j := job(other)) is not None and j["job_state"] == "RUNNING", 30, "main's other node busy")
    blocked = sbatch(job_script, 5, "-p", "main", "--gres=gpu:8", "--comment", "lucid:noprofile", name="blocked")
    wait_until(lambda: (j := job(blocked)) is not None and j["partition"] == "main", 30, "a job waiting in main")
    submitted = wait_until(lambda: (r := store.job(blocked)) is not None and r.original_submit, 10,
                           "lucidd to see the waiting job")
    wait_until(lambda: store.job(probe).requeued_at is not None, 60, "the reclaim")
    row = store.job(probe)
    assert row.requeued_at - submitted >= 20, (row.requeued_at, submitted)  # not before it waited 20 s
    assert row.requeued_at - submitted <= 45, (row.requeued_at, submitted)  # a cycle after, on a loaded machine
    requeue = [a for a in store.actions_for(probe) if a.kind == "requeue"]
    assert len(requeue) == 1 and "kept past Tprof 20 s" in requeue[0].reason and "reclaimed" in requeue[0].reason, \
        requeue
    wait_until(lambda: (j := job(blocked)) is None or j["job_state"] == "RUNNING", 60, "the waiting job to start")
    for jid in (probe, other, waiter, *fill):
        sh("scancel", str(jid))
    daemon.stop()
    assert sacct_runs([probe])[probe][0][:2] == ("profiling", "REQUEUED")


def test_a_long_run_is_requeued_at_long_tprof(clean_cluster, tmp_path, job_script, lucidd_factory):
    """[profiler] long_tprof_s 70 s, long_share 0.25 (8 of the 32 GPUs): a 1-GPU run past Tprof (8 s)
    goes on as one of the oldest long runs and is requeued at 70 s, not left to finish in profiling
    (70 s is past Tprof + lucidd's 60 s grace, where a run counts as missed while lucidd was away)."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state",
                       profiler={"long_tprof_s": 70, "long_share": 0.25, "lend_idle_gpus": False})
    daemon = lucidd_factory(cfg).start()
    job = sbatch(job_script, 200, "--gres=gpu:1", name="long-run")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")

    started = _until_tables(lambda: (r := store.job(job)) is not None and r.profile_start is not None)
    wait_until(started, 30, "the profiling run")
    time.sleep(20)  # past Tprof: still running in profiling, as a long run
    assert store.job(job).profile == "admitted" and any(j["job_id"] == job and j["partition"] == "profiling"
                                                        for j in squeue())
    wait_until(lambda: store.job(job).requeued_at is not None, 90, "the requeue at long_tprof_s")
    row = store.job(job)
    # 70 s, plus lucidd's cycle and whatever a loaded CI machine adds; well short of the 130 s
    # (Tprof 70 + the 60 s grace) where a run counts as missed and is left alone
    assert 70 <= row.requeued_at - row.profile_start <= 100, row
    requeue = [a for a in store.actions_for(job) if a.kind == "requeue"]
    assert len(requeue) == 1 and "Tprof 70 s" in requeue[0].reason, requeue
    wait_until(lambda: any(j["job_id"] == job and j["partition"] == "main" for j in squeue()), 30,
               "its release to main")
    release = [a for a in store.actions_for(job) if a.kind == "release"]
    profiled = re.search(r"profiled for (\d+) s", release[0].reason) if release else None
    assert profiled and 70 <= int(profiled.group(1)) <= 100, release  # not Tprof's 8
    sh("scancel", str(job))
    daemon.stop()
    runs = sacct_runs([job])
    assert runs[job][0][:2] == ("profiling", "REQUEUED"), runs[job]


def test_odd_names_and_comments_pass_through(clean_cluster, tmp_path, job_script, lucidd_factory):
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start()
    name = "odd ;$(touch x) `id` 'q' \"dq\" ünï ✓"
    comment = "line1\nline2 \"c\" $(rm -rf /) ✓"
    job = sbatch(job_script, 12, "--gres=gpu:1", "--comment", comment, name=name)
    wait_until(lambda: any(j["job_id"] == job and j["partition"] != "inbox" for j in squeue()), 30, "lucidd to move it")
    rec = next(j for j in squeue() if j["job_id"] == job)
    assert rec["name"] == name and rec["comment"] == comment
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 60, "the job to finish")
    assert not (tmp_path / "x").exists()
    daemon.stop()
    assert Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}").job(job).name == name


def test_malformed_and_failing_slurm_replies_are_retried(clean_cluster, tmp_path, job_script, lucidd_factory):
    """squeue behind a faulty proxy: garbage, then an error, then the real reply."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "count"
    real = {c: sh("bash", "-c", f"command -v {c}").strip() for c in ("squeue", "sinfo", "sacct", "scontrol")}
    for c, path in real.items():
        (bin_dir / c).symlink_to(path)
    (bin_dir / "squeue").unlink()
    (bin_dir / "squeue").write_text(f"""#!/bin/bash
n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}
if [ "$n" -lt 2 ]; then echo '{{"jobs": [garbage'; exit 0; fi
if [ "$n" -lt 4 ]; then echo 'squeue: error: Unable to contact slurm controller (connect failure)' >&2; exit 1; fi
exec {real['squeue']} "$@"
""")
    (bin_dir / "squeue").chmod(0o755)
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", slurm={"bin_dir": str(bin_dir),
                                                                             "default_partition": "main"})
    daemon = lucidd_factory(cfg).start()
    job = sbatch(job_script, 2, "--gres=gpu:1", name="after-garbage")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 60, "the job to finish")
    assert daemon.proc.poll() is None
    daemon.stop()
    text = daemon.text()
    assert "malformed JSON" in text and "Unable to contact slurm controller" in text
    assert "Traceback" not in text


def test_dry_run_changes_nothing(clean_cluster, tmp_path, job_script, lucidd_factory):
    sh("scontrol", "update", "partitionname=inbox", "state=UP")  # shadow mode: the admin keeps it open
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg, "--dry-run").start()
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    # the inbox is up, so the jobs run with or without lucidd: it must be watching before they
    # are submitted, or it first sees them running and has nothing to (not) do
    wait_until(_until_tables(lambda: store.get_meta("last_ok_cycle") is not None), 60, "lucidd's first dry-run cycle")
    blocker = sbatch(job_script, 6, "-p", "main", "-w", "gpu1", "--exclusive", "--gres=gpu:8", name="b")
    job = sbatch(job_script, 2, "-p", "main", "-w", "gpu1", "--exclusive", "--gres=gpu:1", name="dry")
    # profiled virtually (Tprof 8 s): one that ends inside its run, one that outlives it. The other
    # nodes are kept full for 3 s, so lucidd sees both pending (new) before Slurm starts them
    fill = [sbatch(job_script, 3, "-p", "main", "-w", f"gpu{n}", "--exclusive", "--gres=gpu:8", name="f")
            for n in (2, 3, 4)]
    short = sbatch(job_script, 1, "-p", "main", "--gres=gpu:1", name="short")
    long = sbatch(job_script, 14, "-p", "main", "--gres=gpu:1", name="long")
    ids = (job, blocker, short, long, *fill)
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in ids], 90, "jobs to finish")
    time.sleep(3)  # a cycle or two to see them end
    daemon.stop()
    assert partition_up("inbox")
    acts = store.actions_for(job)
    assert acts and all(a.status == "dry-run" for a in acts)
    runs = sacct_runs(list(ids))
    # Slurm ran each where it asked to run (job_submit.lua 6 routes no job while the inbox is UP: the
    # shadow sees them in main, as if they had arrived there); lucidd moved nothing
    assert runs[job][-1][0] == "main"
    assert all(len(runs[j]) == 1 and runs[j][0][0] == "main" for j in (short, long)), runs  # one run each
    assert store.job(short).profile == "finished", store.job(short).profile_reason
    kinds = {a.kind: a.status for a in store.actions_for(long)}
    assert kinds.get("profile") == kinds.get("requeue") == kinds.get("release") == "dry-run", kinds


def test_once_exit_codes(slurm_cluster, tmp_path):
    from .conftest import VENV_BIN

    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    ok = subprocess.run([str(VENV_BIN / "lucidd"), "--config", str(cfg), "--once", "--dry-run"], capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = write_config(tmp_path / "bad.toml", tmp_path / "state", slurm={"bin_dir": str(tmp_path / "nothing")})
    r = subprocess.run([str(VENV_BIN / "lucidd"), "--config", str(bad), "--once"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "not found" in r.stderr


def test_a_start_reads_the_real_slurmctlds_settings_and_warns_without_stopping(clean_cluster, tmp_path,
                                                                             lucidd_factory):
    """The test cluster runs priority/multifactor (no warning) with sched/backfill at Slurm's default
    bf_window of 1 day, and its partitions have no MaxTime: lucidd names the two it orders, not the
    inbox or profiling, in its log and for `lucidctl status`, and runs on."""
    from .conftest import VENV_BIN

    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    check = subprocess.run([str(VENV_BIN / "lucidd"), "--config", str(cfg), "--once", "--dry-run"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and "slurm.conf: bf_window is 1 day" in check.stdout + check.stderr, check.stderr
    daemon = lucidd_factory(cfg).start()
    db = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    wait_until(_until_tables(lambda: db.get_meta("last_ok_cycle")), 30, "lucidd's first cycle")
    daemon.stop()
    (warning,) = json.loads(db.get_meta("slurm_warnings"))
    assert "main (MaxTime UNLIMITED), research (MaxTime UNLIMITED)" in warning, warning
    assert "PriorityType" not in warning and "inbox" not in warning and "profiling (" not in warning
    assert f"slurm.conf: {warning}" in daemon.text()
    status = subprocess.run([str(VENV_BIN / "lucidctl"), "--json", "status", "--config", str(cfg)],
                            capture_output=True, text=True, timeout=60)
    assert json.loads(status.stdout)["slurm_warnings"] == [warning], status.stderr


def test_a_partition_that_does_not_exist_waits_in_the_inbox_with_a_reason(clean_cluster, tmp_path, job_script,
                                                                          lucidd_factory):
    """`sbatch -p mian` is refused at submission (job_submit.lua 6, as plain Slurm; before, it was
    accepted into the inbox and waited there). A job whose partition went away while it waited
    in the inbox (here: its recorded request changed before lucidd saw it) is not profiled, Slurm
    refuses the move, and the job waits in the inbox, tried again after a minute (not every
    cycle), with a reason that says what its owner can do; once they name a partition that exists
    it runs there."""
    refused = subprocess.run(["sbatch", "-p", "mian", "--gres=gpu:1", "--wrap", "true"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode != 0 and "invalid partition specified: 'mian'" in refused.stderr, refused
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    job = sbatch(job_script, 3, "-p", "main", "--gres=gpu:1", name="typo")
    sh("scontrol", "update", f"jobid={job}", "admincomment=lucid:partition=mian")
    daemon = lucidd_factory(cfg).start()
    db = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    wait_until(_until_tables(lambda: "scontrol update jobid=" in getattr(db.job(job), "profile_reason", "")), 30,
               "lucidd to say why the job waits")
    time.sleep(6)  # six more cycles (interval 1 s): no new try before the first minute is up
    assert [(j["partition"], j["job_state"]) for j in squeue() if j["job_id"] == job] == [("inbox", "PENDING")]
    assert daemon.text().count(f"job {job}: waits in inbox: Slurm refused") == 1, daemon.text()[-3000:]
    assert "mian" in db.job(job).profile_reason
    sh("scontrol", "update", f"jobid={job}", "partition=main")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 60, "the job to run in main")
    daemon.stop()
    assert [r[:2] for r in sacct_runs([job])[job]] == [("main", "COMPLETED")]


def test_a_job_requeued_into_the_closed_inbox_goes_to_its_partition(clean_cluster, tmp_path, job_script,
                                                                     lucidd_factory):
    """A job that started in the inbox while it was open (lucidd away) and is requeued after lucidd
    closed it again (a node failure, `scontrol requeue`) pends in a DOWN partition: lucidd sends it
    to the partition it asked for, unprofiled."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    sh("scontrol", "update", "partitionname=inbox", "state=UP")  # as fail-open leaves it
    # put there by an admin: job_submit.lua 6 leaves new jobs in their partitions while the inbox is
    # open, and takes the inbox out of what they ask for (an older script routed them into it)
    job = sbatch(job_script, 120, "--gres=gpu:1", "--hold", name="ran-in-inbox")
    sh("scontrol", "update", f"jobid={job}", "partition=inbox")
    sh("scontrol", "release", str(job))
    wait_until(lambda: any(j["job_id"] == job and j["job_state"] == "RUNNING" and j["partition"] == "inbox"
                           for j in squeue()), 30, "the job to start in the open inbox")
    daemon = lucidd_factory(cfg).start()
    wait_until(lambda: not partition_up("inbox"), 30, "lucidd to close the inbox")
    sh("scontrol", "requeue", str(job))
    wait_until(lambda: any(j["job_id"] == job and j["partition"] == "main" for j in squeue()), 30,
               "lucidd to send the requeued job to main")
    assert "back in inbox after a requeue" in daemon.text()
    sh("scancel", str(job))
    daemon.stop()


def test_job_submit_lua_routes_through_the_inbox_only_while_it_is_down(clean_cluster, job_script):
    """A review: while lucidd is away (the inbox UP), a job routed into the inbox ran there, on nodes
    outside the partition it asked for (`-p research` on gpu1, research being gpu[3-4]); `srun -I`
    always failed (`Partition in DOWN state`); `-p nosuch` was accepted and waited for ever. As a
    plain user, no lucidd running."""
    def as_nobody(*argv):
        return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True,
                              timeout=60, cwd="/tmp")

    out = as_nobody("srun", "-I", "-p", "main", "--gres=gpu:1", "true")
    assert out.returncode == 0, out
    out = as_nobody("sbatch", "-p", "main,nosuch", "--wrap", "true")
    assert out.returncode != 0 and "invalid partition specified: 'nosuch'" in out.stderr, out
    # --nodelist (version 8): left in its partition, so Slurm checks the node against it, as plain
    # Slurm does (through the inbox, which holds every node, gpu1 passed and the job pended for ever)
    out = as_nobody("sbatch", "-p", "research", "-w", "gpu1", "--gres=gpu:1", "--wrap", "true")
    assert out.returncode != 0 and "Requested node configuration is not available" in out.stderr, out
    r = as_nobody("sbatch", "--parsable", "-p", "research", "-w", "gpu3", "--gres=gpu:1", "--begin=now+3600",
                  "-o", "/dev/null", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip().split(";")[0])
    try:
        assert [j["partition"] for j in squeue() if j["job_id"] == job] == ["research"]
    finally:
        sh("scancel", str(job), check=False)
    sh("scontrol", "update", "partitionname=inbox", "state=UP")  # as lucidd's stop and fail-open leave it
    jobs = []
    try:
        for opts in (["-p", "research"], []):
            r = as_nobody("sbatch", "--parsable", *opts, "--gres=gpu:1", "--begin=now+3600", "-o", "/dev/null",
                          "--wrap", "sleep 30")
            assert r.returncode == 0, r.stderr
            jobs.append(int(r.stdout.strip().split(";")[0]))
        got = {j["job_id"]: (j["partition"], j.get("admin_comment", "")) for j in squeue() if j["job_id"] in jobs}
        assert got == {jobs[0]: ("research", ""), jobs[1]: ("main", "")}, got  # no -p: DEFAULT, not the inbox
    finally:
        sh("scontrol", "update", "partitionname=inbox", "state=DOWN")
        for job in jobs:
            sh("scancel", str(job), check=False)
    r = as_nobody("sbatch", "--parsable", "-p", "research", "--begin=now+3600", "-o", "/dev/null", "--wrap", "true")
    job = int(r.stdout.strip().split(";")[0])
    try:
        assert [j["partition"] for j in squeue() if j["job_id"] == job] == ["inbox"]  # DOWN again: routed
    finally:
        sh("scancel", str(job), check=False)


def test_job_submit_lua_keeps_users_out_of_the_inbox_exits_and_out_of_profiling(clean_cluster):
    """The guard in job_submit.lua, as a user meets it (no lucidd running): a job waiting in the
    inbox cannot be moved out by its owner, nor any job into profiling (it starts before every
    queue) or out of it, or back into the inbox (the default partition, DOWN while lucidd runs: an
    audit found such jobs left there); a move between the site's own partitions is the user's.
    Slurm 22.05 drops the script's message in job_modify, so the user reads the error code's text
    (the admin trial)."""
    def as_nobody(*argv):
        return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True, timeout=60)

    # --begin keeps it pending wherever it is moved (a running job's partition cannot change)
    r = as_nobody("sbatch", "--parsable", "-p", "main", "--gres=gpu:1", "--begin=now+3600", "-o", "/dev/null",
                  "--wrap", "sleep 30")
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip().split(";")[0])
    try:
        assert [j["partition"] for j in squeue() if j["job_id"] == job] == ["inbox"]
        out = as_nobody("scontrol", "update", f"jobid={job}", "partition=research")
        assert out.returncode != 0 and "Access/permission denied" in out.stderr, out
        sh("scontrol", "update", f"jobid={job}", "partition=main")  # as lucidd (root) does
        out = as_nobody("scontrol", "update", f"jobid={job}", "partition=profiling")
        assert out.returncode != 0 and "Access/permission denied" in out.stderr, out
        assert as_nobody("scontrol", "update", f"jobid={job}", "partition=research").returncode == 0
        assert [j["partition"] for j in squeue() if j["job_id"] == job] == ["research"]
        for into in ("inbox", "inbox,main"):
            out = as_nobody("scontrol", "update", f"jobid={job}", f"partition={into}")
            assert out.returncode != 0 and "Access/permission denied" in out.stderr, out
        assert [j["partition"] for j in squeue() if j["job_id"] == job] == ["research"]
        # waiting in profiling (lucidd's move): its owner cannot take it out (lucidd's ExcNodeList
        # for lent GPUs would go with it)
        sh("scontrol", "update", f"jobid={job}", "partition=profiling")
        out = as_nobody("scontrol", "update", f"jobid={job}", "partition=research")
        assert out.returncode != 0 and "Access/permission denied" in out.stderr, out
        assert [j["partition"] for j in squeue() if j["job_id"] == job] == ["profiling"]
        # nor turn its requeue off (version 8): lucidd's requeue at Tprof would be refused, and the run
        # would stay in profiling, ahead of every queue (a review)
        out = as_nobody("scontrol", "update", f"jobid={job}", "requeue=0")
        assert out.returncode != 0 and "Access/permission denied" in out.stderr, out
        assert [j["requeue"] for j in squeue() if j["job_id"] == job] == [True]
    finally:
        sh("scancel", str(job), check=False)
    # the user the shipped unit runs lucidd as (`slurm`, job_submit.lua's LUCIDD_USERS) moves jobs out
    # of the inbox and into profiling: refused, every job stranded in the DOWN inbox (an admin trial).
    # Its own job here, so that Slurm's own permission check passes and the script's alone is tested.
    r = subprocess.run(["runuser", "-u", "slurm", "--", "sbatch", "--parsable", "--gres=gpu:1", "--begin=now+3600",
                        "-o", "/dev/null", "--wrap", "sleep 30"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip().split(";")[0])
    try:
        for part in ("profiling", "main"):
            out = subprocess.run(["runuser", "-u", "slurm", "--", "scontrol", "update", f"jobid={job}",
                                  f"partition={part}"], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out
            assert [j["partition"] for j in squeue() if j["job_id"] == job] == [part]
    finally:
        sh("scancel", str(job), check=False)


def test_the_backends_requeue_leaves_an_ended_job_alone_and_requeues_a_running_one(clean_cluster, job_script):
    """Slurm 22.05 requeues a COMPLETED batch job too, and it runs again from the start; lucidd's
    requeue (`scontrol requeue Incomplete`) must leave a job that ended before slurmctld took the
    request alone, so the milliseconds after lucidd's last look cannot run a job twice."""
    from lucidd.backends.slurm import SlurmBackend, SlurmRunner

    backend = SlurmBackend(SlurmRunner())
    ended = sbatch(job_script, 1, "--gres=gpu:1", "-p", "main", name="ended")
    running = sbatch(job_script, 120, "--gres=gpu:1", "-p", "main", name="running")
    for job in (ended, running):  # job_submit.lua put them in the inbox: an admin's move
        sh("scontrol", "update", f"jobid={job}", "partition=main")
    states = lambda: {j["job_id"]: j["job_state"] for j in squeue()}  # noqa: E731
    wait_until(lambda: states().get(ended) == "COMPLETED" and states().get(running) == "RUNNING", 60,
               "one job to end and one to run")
    backend.requeue(ended)
    backend.requeue(running)
    after = backend.job_states([ended, running])
    assert after[ended][0] == "COMPLETED" and after[ended][2] == 0, after  # not requeued: it ran once
    assert after[running][2] == 1, after  # requeued
    sh("scancel", str(running))


HET_SCRIPT = """#!/bin/bash
#SBATCH -p main --gres=gpu:1
#SBATCH hetjob
#SBATCH -p research --gres=gpu:2
sleep 3
"""


def _het_job(tmp_path) -> int:
    script = tmp_path / "het.sh"
    script.write_text(HET_SCRIPT)
    return int(sh("sbatch", "--parsable", "-J", "het", "-o", f"{tmp_path}/%j.out", str(script)).strip().split(";")[0])


def _het_partitions(leader) -> dict:
    """offset -> the partition its component runs or ran in (sacct: one row per component)."""
    def read():
        data = json.loads(sh("sacct", "--json", "--allusers", "-j", str(leader)))
        rows = {j["het"]["job_offset"]: (j["partition"], j["state"]["current"]) for j in data["jobs"]
                if (j.get("het") or {}).get("job_id") == leader}
        return len(rows) == 2 and all(s == "COMPLETED" for _, s in rows.values()) and rows
    return {k: p for k, (p, _) in wait_until(read, 60, "both components of the het job to end").items()}


def test_a_het_job_runs_each_component_in_the_partition_it_asked_for(clean_cluster, tmp_path, lucidd_factory):
    """`-p main ... : -p research ...` (a review, checked on 22.05): lucidd released the job by its
    leader's plain id, and Slurm moved both components to main. Now the research component goes
    first by its own id, then the leader alone (jobid=L+0). lucidd-failopen does the same."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start()
    leader = _het_job(tmp_path)
    assert _het_partitions(leader) == {0: "main", 1: "research"}
    daemon.stop()  # (its stop opens the inbox: closed again, as a lucidd killed with -9 leaves it)
    sh("scontrol", "update", "partitionname=inbox", "state=DOWN")
    # fail-open, with lucidd gone: the same two partitions
    leader = _het_job(tmp_path)
    wait_until(lambda: sum(j["partition"] == "inbox" for j in squeue() if j["job_state"] == "PENDING") == 2, 30,
               "the het job's two components waiting in the inbox")
    # as the systemd timer runs it: until lucidd's heartbeat is old enough and it opens the inbox
    wait_until(lambda: failopen(cfg).returncode == 0 and partition_up("inbox"), 30, "lucidd-failopen to act", step=1)
    assert _het_partitions(leader) == {0: "main", 1: "research"}


def test_interactive_and_deadline_jobs_go_to_their_partition_unprofiled(clean_cluster, tmp_path, job_script,
                                                                         lucidd_factory):
    """An admin trial (28 November 2026): a `salloc` session admitted to profiling could not be
    requeued (Slurm requeues only batch jobs), so it ran to its end there, ahead of every queue,
    holding the profiling room; and a `--deadline` job that fitted without lucidd was cancelled
    (DEADLINE) after its restart."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start()
    session = subprocess.Popen(["salloc", "--gres=gpu:1", "-J", "session", "sleep", "6"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = sbatch(job_script, 5, "--gres=gpu:1", "--deadline=now+3600", "-t", "5", name="deadline")
    try:
        wait_until(lambda: {j["name"] for j in squeue() if j["partition"] == "main"} >= {"session", "deadline"}
                   or session.poll() is not None, 60, "both jobs to reach main")
        session.wait(timeout=60)
    finally:
        if session.poll() is None:
            session.kill()
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    rows = {r.name: r for r in store.jobs().values()}
    assert "interactive allocation" in rows["session"].profile_reason, rows["session"].profile_reason
    assert "--deadline" in rows["deadline"].profile_reason, rows["deadline"].profile_reason
    wait_until(lambda: not active_jobs(), 60, "both jobs to end")
    runs = sacct_runs([deadline])
    assert [(p, s) for p, s, _ in runs[deadline]] == [("main", "COMPLETED")], runs
    daemon.stop()


def test_a_job_that_asks_gets_its_warning_signal_before_the_requeue(clean_cluster, tmp_path, lucidd_factory):
    """`--comment lucid:signal=B:USR1@4`: the batch shell gets SIGUSR1 about 4 s before lucidd
    requeues its profiling run (Tprof 8 s here), saves, and resumes after the restart; Slurm's
    requeue itself sends only SIGTERM (an admin trial: a Lightning-style job lost its run)."""
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    script = tmp_path / "ckpt.sh"
    script.write_text("#!/bin/bash\n"
                      "trap 'echo \"usr1 $(date +%s) step=$step\"; echo $step > \"$1.ckpt\"' USR1\n"
                      "step=$(cat \"$1.ckpt\" 2>/dev/null || echo 0)\n"
                      "echo \"start $(date +%s) restarts=${SLURM_RESTART_COUNT:-0} from=$step\"\n"
                      "while [ $step -lt 30 ]; do sleep 1 & wait; step=$((step+1)); done\n"
                      "echo \"done $(date +%s)\"\n")
    script.chmod(0o755)
    daemon = lucidd_factory(cfg).start()
    out = tmp_path / "ckpt"
    job = int(sh("sbatch", "--parsable", "-J", "ckpt", "-o", f"{out}.out", "--gres=gpu:1",
                 "--comment", "lucid:signal=B:USR1@4", str(script), str(out)).strip())
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 120, "the job to finish")
    text = (tmp_path / "ckpt.out").read_text()
    assert "usr1" in text and "restarts=1 from=" in text and "done" in text, text
    resumed = int(re.search(r"restarts=1 from=(\d+)", text).group(1))
    assert resumed >= 2, text  # it resumed from the step it saved at the warning, not from 0
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    kinds = [(a.kind, a.status) for a in store.actions_for(job)]
    assert kinds.index(("signal", "applied")) < kinds.index(("requeue", "applied")), kinds
    daemon.stop()
