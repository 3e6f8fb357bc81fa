"""A profile lucidd judges must cover the whole profiling run, and the samplers' clocks may differ
from the controller's and from each other (a review: a profile of the run's first minute let a
job that later held 20 GiB share a 24 GiB GPU; a node 10 minutes behind lost every profile; a
node a day ahead pruned every node's rows)."""

from __future__ import annotations

import logging
import time

import pytest
from types import SimpleNamespace

from binder.live import LivePackingConfig, OWN, SHARED, shard_decision
from lucidd.live.store import GpuNodeRow, Store, StoreError
from profiler.nvml_sampler import MIB
from profiler.sampler_main import SamplerService
from tests.profiler.fake_nvml import FakeNvml, fake_proc
from tests.profiler.test_nvml_sampler import Clock, _cfg

GIB = 1024 * MIB
T0 = 1_800_000_000.0


def _decide(profile):
    return shard_decision(SimpleNamespace(job_id=7, time_limit_s=None), "main", profile, {"main": 99},
                          LivePackingConfig(gpu_memory_mib=24576))


def _node(tmp_path, store, clock, name="gpu01", job=7, keep_days=30, fresh=True):
    proc = tmp_path / f"proc-{name}"
    fake_proc(proc, 100, job=job, partition="profiling")
    nvml = FakeNvml([{"util": 4, "mem_util": 1, "procs": {100: int(1.5 * GIB)}}])
    svc = SamplerService(_cfg(tmp_path, node=name, keep_days=keep_days), nvml, store, str(proc), clock=clock,
                         sleep=lambda s: None)
    svc.start()
    if not fresh:  # started while the run was on
        return svc, nvml
    # the sampler's first reading sees no job: the run starts after it (profile_incompleteness)
    nvml.gpus[0]["procs"] = {}
    svc.step()
    clock.t += 5
    nvml.gpus[0]["procs"] = {100: int(1.5 * GIB)}
    return svc, nvml


def _run(svc, clock, seconds):
    for _ in range(int(seconds // 5)):
        svc.step()
        clock.t += 5


def _a_run_that_ended(tmp_path):
    """A 2-minute profiling run of job 7, then 2 minutes without it: flushed, and in a heartbeat."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock = Clock(T0)
    svc, nvml = _node(tmp_path, store, clock)
    _run(svc, clock, 120)
    nvml.gpus[0]["procs"] = {}
    _run(svc, clock, 120)
    return store, clock, svc, nvml


def _drop_the_later_heartbeat_columns(store):
    """gpu_nodes as before flushed_at, sampling_since and clock_offset_s (an older sampler's table,
    or a backup restored from before them)."""
    with store.engine.begin() as c:
        for col in ("flushed_at", "sampling_since", "clock_offset_s"):
            c.exec_driver_sql(f"ALTER TABLE gpu_nodes DROP COLUMN {col}")


def test_a_profile_of_the_runs_start_only_lets_no_job_share(tmp_path):
    """The sampler dies 60 s into a 200 s run (the OOM killer, a stop): the rows hold the startup's
    4 % and 1.5 GiB, and lucidd lowered the job to one shard."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock = Clock(T0)
    svc, _ = _node(tmp_path, store, clock)
    _run(svc, clock, 65)  # readings 0..60 s, flushed at 0, 30 and 60; then the sampler is gone
    profile = store.profiling_gpu_profiles([7], "profiling", since={7: T0 - 10}).get(7)
    assert profile is not None and profile.util_samples == 12 and profile.gmem_mib == 1536.0
    shards, why = _decide(profile)
    assert shards == OWN and "profile incomplete: the sampler on gpu01 has not written since the run ended" in why


def test_the_decision_waits_for_no_flush_and_shares_once_the_sampler_has_written(tmp_path):
    """Judged in the cycle right after the requeue, the run's last flush_s is not yet written: a GPU
    of its own then (never held back), and the next cycles may lower it once the heartbeat shows
    a flush taken after the run's last reading."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock = Clock(T0)
    svc, nvml = _node(tmp_path, store, clock)
    _run(svc, clock, 120)  # the run's readings at 5..120 s, flushed to 120 s, heartbeat at 120 s
    nvml.gpus[0]["procs"] = {}  # requeued: its processes are gone
    shards, why = _decide(store.profiling_gpu_profiles([7], "profiling").get(7))
    assert shards == OWN and "profile incomplete" in why
    _run(svc, clock, 60)  # flushed at 150 and 180 s (nothing left), heartbeat at 180 s
    beat = store.gpu_nodes()["gpu01"]
    assert beat.flushed_at == int(T0) + 180 and beat.sampling_since == int(T0)
    shards, why = _decide(store.profiling_gpu_profiles([7], "profiling").get(7))
    assert shards == SHARED, why


def test_a_sampler_restarted_during_the_run_leaves_its_profile_incomplete(tmp_path):
    """What the first sampler process had not written when it died is lost; the second one's
    flush says nothing of it."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock = Clock(T0)
    first, _ = _node(tmp_path, store, clock)
    _run(first, clock, 65)
    clock.t += 20  # readings 65..85 s lost with the process
    second, nvml = _node(tmp_path, store, clock, fresh=False)
    _run(second, clock, 60)
    nvml.gpus[0]["procs"] = {}
    _run(second, clock, 120)
    shards, why = _decide(store.profiling_gpu_profiles([7], "profiling").get(7))
    assert shards == OWN and "(re)started" in why
    assert store.gpu_nodes()["gpu01"].flushed_at > store.gpu_profiles(7)[0].last_t  # flushed since the run


def test_a_node_whose_clock_is_behind_keeps_its_profiles(tmp_path, caplog):
    """A node 10 minutes behind the controller: its rows began "before" lucidd first saw the job
    (by the controller's clock) and were taken for an earlier job's of the same id. Its sampler
    says so in its log, and its heartbeat gives the offset lucidd corrects by."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    # the controller's clock: real time, advanced as the node's fake one is (the offset stays 600 s)
    start = time.time()
    clock = Clock(start - 600)
    ctl = lambda: start + (clock.t - (start - 600))  # noqa: E731
    with caplog.at_level(logging.WARNING, "lucidd.sampler"):
        svc, nvml = _node(tmp_path, store, clock)
    assert "this node's clock is -60" in caplog.text
    # (its first heartbeat was at _node's first reading, with the offset as it is)
    assert abs(store.gpu_nodes()["gpu01"].clock_offset_s + 600) < 5
    first_seen = ctl() - 5
    _run(svc, clock, 60)
    nvml.gpus[0]["procs"] = {}
    _run(svc, clock, 65)
    got = store.profiling_gpu_profiles([7], "profiling", since={7: first_seen}, now=ctl())
    assert 7 in got and got[7].incomplete == ""
    # without the heartbeat's offset the rows are compared as they are (a sampler older than this)
    with store.session() as s:
        s.get(GpuNodeRow, "gpu01").clock_offset_s = None
    assert 7 not in store.profiling_gpu_profiles([7], "profiling", since={7: first_seen}, now=ctl())


def test_an_earlier_jobs_row_of_the_same_id_is_still_left_out_on_a_skewed_node(tmp_path):
    """The id-reuse filter, on the node's clock: the node is 10 minutes behind, and a row that
    ended an hour before lucidd first saw the job (by either clock) is not the job's."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    start = time.time()
    clock = Clock(start - 600 - 3600)
    ctl = lambda: start - 3600 + (clock.t - (start - 600 - 3600))  # noqa: E731
    svc, nvml = _node(tmp_path, store, clock)
    _run(svc, clock, 60)
    nvml.gpus[0]["procs"] = {}
    clock.t += 3600
    _run(svc, clock, 65)
    first_seen = ctl() - 5
    assert 7 not in store.profiling_gpu_profiles([7], "profiling", since={7: first_seen}, now=ctl())
    # ... nor once the new job's readings are added to that row (its first_t is the earlier job's)
    nvml.gpus[0]["procs"] = {100: GIB}
    _run(svc, clock, 60)
    nvml.gpus[0]["procs"] = {}
    _run(svc, clock, 65)
    assert 7 not in store.profiling_gpu_profiles([7], "profiling", since={7: first_seen}, now=ctl())


def test_a_sampler_prunes_only_its_own_nodes_rows_by_its_own_clock(tmp_path):
    """gpu02's clock is two days ahead: with keep_days = 1 it pruned every row and heartbeat of
    gpu01, whose runs were minutes old."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock1, clock2 = Clock(T0), Clock(T0 + 2 * 86400)
    one, _ = _node(tmp_path, store, clock1, "gpu01", job=7, keep_days=1)
    two, _ = _node(tmp_path, store, clock2, "gpu02", job=8, keep_days=1)
    _run(one, clock1, 35)
    _run(two, clock2, 35)
    assert {r.node for r in store.gpu_profiles(7)} == {"gpu01"} and set(store.gpu_nodes()) == {"gpu01", "gpu02"}
    two.last_prune = 0
    two.prune(clock2.t)
    assert store.gpu_profiles(7) and set(store.gpu_nodes()) == {"gpu01", "gpu02"}


def test_rows_and_heartbeats_no_offset_speaks_for_are_still_pruned(tmp_path):
    """Rows of a node that never wrote a heartbeat, and the heartbeat of one gone before its sampler
    gave a clock offset, were never pruned once each sampler pruned only what its clock can judge
    (a review): they are, by the pruning sampler's clock, the heartbeat with keep_s more to spare."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock = Clock(T0)
    svc, _ = _node(tmp_path, store, clock, "gpu01", job=7, keep_days=1)
    _run(svc, clock, 35)
    old = store.gpu_profiles(7)[0]
    with store.engine.begin() as c:  # an old sampler's node: a row, no heartbeat; and a gone node's heartbeat
        c.exec_driver_sql("INSERT INTO gpu_profiles (job_id, partition, node, first_t, last_t, samples, util_samples,"
                          " gpus) VALUES (9, 'profiling', 'gpu09', 100, 200, 1, 1, '0')")
    store.save_gpu_node("gpu08", int(T0) - 3 * 86400, 8, 24576.0)
    svc.last_prune = 0
    svc.prune(clock.t)
    assert not store.gpu_profiles(9) and "gpu08" not in store.gpu_nodes()
    assert store.gpu_profiles(7)[0].last_t == old.last_t and "gpu01" in store.gpu_nodes()


def test_a_sampler_writes_its_heartbeat_to_a_table_lucidd_has_not_upgraded_yet(tmp_path):
    """A gpu_nodes table made by an older sampler lacks flushed_at: the new sampler writes what it
    can (lucidd then trusts none of the node's profiles), and the columns come with lucidd's upgrade."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    _drop_the_later_heartbeat_columns(store)
    clock = Clock(T0)
    svc, nvml = _node(tmp_path, store, clock)
    _run(svc, clock, 35)
    nvml.gpus[0]["procs"] = {}
    _run(svc, clock, 65)
    beat = store.gpu_nodes()["gpu01"]
    assert beat.seen_at == int(T0) + 60 and beat.flushed_at is None
    shards, why = _decide(store.profiling_gpu_profiles([7], "profiling").get(7))
    assert shards == OWN and "has not said what it has written" in why
    Store(store.url).create()  # lucidd started: its upgrade adds the columns
    _run(svc, clock, 65)
    assert store.gpu_nodes()["gpu01"].flushed_at is not None
    assert _decide(store.profiling_gpu_profiles([7], "profiling").get(7))[0] == SHARED


def test_a_profile_found_whole_stays_whole_after_a_clean_sampler_restart(tmp_path):
    """`systemctl restart lucidd-sampler` (an upgrade) after a run ended and was seen whole: every
    profiled job still waiting lost its packing for good, and a job lowered to shards was raised
    again (a review). What lucidd has once found whole stays so while the rows are unchanged."""
    store, clock, svc, nvml = _a_run_that_ended(tmp_path)  # flushed, and a heartbeat says so
    assert _decide(store.profiling_gpu_profiles([7], "profiling").get(7))[0] == SHARED
    svc.close()
    clock.t += 5
    svc2, nvml2 = _node(tmp_path, store, clock, fresh=False)
    nvml2.gpus[0]["procs"] = {}
    _run(svc2, clock, 3600)
    assert _decide(store.profiling_gpu_profiles([7], "profiling").get(7))[0] == SHARED
    # another lucidd process (a restart) cannot know it was: the new sampler cannot vouch for it
    fresh = Store(f"sqlite:///{tmp_path}/l.db")
    assert "(re)started" in fresh.profiling_gpu_profiles([7], "profiling")[7].incomplete


def test_a_heartbeat_after_its_columns_went_is_written_at_the_next_try(tmp_path):
    """A backup from before gpu_nodes had flushed_at etc. restored (docs/deploy.md, going back):
    every heartbeat failed ("no such column") until the sampler was restarted (a review)."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    assert store.save_gpu_node("gpu01", 100, 1, 1000.0, flushed_at=90, sampling_since=10, clock_offset_s=0.0)
    _drop_the_later_heartbeat_columns(store)
    with pytest.raises(StoreError):
        store.save_gpu_node("gpu01", 200, 1, 1000.0, flushed_at=190, sampling_since=10, clock_offset_s=0.0)
    assert store.save_gpu_node("gpu01", 201, 1, 1000.0, flushed_at=190, sampling_since=10) is False
    assert store.gpu_nodes()["gpu01"].seen_at == 201


def test_a_once_reading_beside_the_service_leaves_what_the_service_vouches_for(tmp_path):
    """`lucidd-sampler --once` (an admin's look) beside the running service wrote its own
    sampling_since: every run before it looked incomplete (a GPU check on stand-ins found it)."""
    store, clock, svc, nvml = _a_run_that_ended(tmp_path)
    before = store.gpu_nodes()["gpu01"]
    look, look_nvml = _node(tmp_path, store, clock, fresh=False)
    look_nvml.gpus[0]["procs"] = {}  # (the run has ended)
    look.once = True
    look.step()
    after = store.gpu_nodes()["gpu01"]
    assert (after.flushed_at, after.sampling_since) == (before.flushed_at, before.sampling_since)
    assert after.seen_at >= before.seen_at
    fresh = Store(f"sqlite:///{tmp_path}/l.db")  # (not a profile this lucidd found whole already)
    assert _decide(fresh.profiling_gpu_profiles([7], "profiling").get(7))[0] == SHARED


def test_a_stop_writes_the_heartbeat_of_its_last_flush(tmp_path):
    """A run that ended in the minute before the sampler's stop: its last flush was never in a
    heartbeat (at most one a minute), so it was never found whole."""
    store = Store(f"sqlite:///{tmp_path}/l.db").create()
    clock = Clock(T0)
    svc, nvml = _node(tmp_path, store, clock)
    _run(svc, clock, 65)  # a heartbeat at the start and at 60 s
    nvml.gpus[0]["procs"] = {}
    _run(svc, clock, 10)
    assert "has not written since the run ended" in store.profiling_gpu_profiles([7], "profiling")[7].incomplete
    svc.close()
    fresh = Store(f"sqlite:///{tmp_path}/l.db")
    assert fresh.profiling_gpu_profiles([7], "profiling")[7].incomplete == ""


def test_a_job_run_again_whose_readings_were_lost_is_not_taken_for_whole(tmp_path, monkeypatch):
    """Run A (1.5 GiB) is found whole and remembered; the job runs again in profiling (its restart
    count goes up) at 20 GiB while the database is away, and the sampler is restarted, losing it.
    The rows are run A's, unchanged: remembered by rows alone it was whole, and the job let share
    a 24 GiB GPU (a review)."""
    store, clock, svc, nvml = _a_run_that_ended(tmp_path)
    assert _decide(store.profiling_gpu_profiles([7], "profiling", runs={7: 1}).get(7))[0] == SHARED
    real = store.save_gpu_profiles

    def down(*a, **k):
        raise StoreError("database unavailable")

    monkeypatch.setattr(store, "save_gpu_profiles", down)
    nvml.gpus[0]["procs"] = {100: int(20 * GIB)}
    _run(svc, clock, 300)
    nvml.gpus[0]["procs"] = {}
    _run(svc, clock, 30)
    svc.close()  # its flush fails: run B is lost
    monkeypatch.setattr(store, "save_gpu_profiles", real)
    clock.t += 5
    svc2, nvml2 = _node(tmp_path, store, clock, fresh=False)
    nvml2.gpus[0]["procs"] = {}
    _run(svc2, clock, 300)
    assert "(re)started" in store.profiling_gpu_profiles([7], "profiling", runs={7: 2})[7].incomplete
    assert store.profiling_gpu_profiles([7], "profiling", runs={7: 1})[7].incomplete == ""  # run A's, as found
