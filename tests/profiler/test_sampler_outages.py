"""The NVML sampler through a database outage and a GPU lost at its start."""

from __future__ import annotations

from types import SimpleNamespace

from binder.live import LivePackingConfig, shard_decision
from lucidd.live.store import Store, StoreError
import profiler.nvml_sampler as ns
from profiler.nvml_sampler import MIB
from profiler.sampler_main import SamplerService
from tests.profiler.fake_nvml import FakeNvml, NVMLError_GpuIsLost, fake_proc
from tests.profiler.test_nvml_sampler import Clock, _cfg

GIB = 1024 * MIB


def test_a_run_forgotten_while_the_database_is_away_keeps_its_memory_peak(tmp_path):
    """The database is away for a few minutes: a run's 20 GiB peak is kept in `unsaved`; the run
    is not seen for 3 x flush_s (a CPU phase) and is forgotten in memory; it comes back at 2 GiB.
    The next flush replaced the unwritten 20 GiB figures by the fresh 2 GiB ones, and once the
    database answered, the job was let share a 24 GiB GPU."""
    proc = tmp_path / "proc"
    fake_proc(proc, 100, job=101, partition="profiling")
    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url)
    nvml = FakeNvml([{"util": 5, "mem_util": 1, "procs": {100: 20 * GIB}}])
    clock = Clock(10_000.0)
    svc = SamplerService(cfg, nvml, store, str(proc), clock=clock, sleep=lambda s: None)
    svc.start()
    live_save = store.save_gpu_profiles

    def dead(profiles):
        raise StoreError("database sqlite:///x unavailable (session): connection refused")

    store.save_gpu_profiles = dead
    for phase, readings in (({100: 20 * GIB}, 6), ({}, 36), ({100: 2 * GIB}, 6)):
        nvml.gpus[0]["procs"] = phase
        for _ in range(readings):
            svc.step()
            clock.t += 5
    store.save_gpu_profiles = live_save
    clock.t += 30
    assert svc.step() and not svc.unsaved
    (row,) = store.gpu_profiles(101)
    assert row.gmem_mib == 20 * 1024
    profile = store.profiling_gpu_profiles([101], "profiling")[101]
    shards, why = shard_decision(SimpleNamespace(job_id=101, time_limit_s=None), "main", profile, {"main": 999},
                                 LivePackingConfig(gpu_memory_mib=24576))
    assert shards == 2, why


def test_a_gpu_lost_when_the_sampler_starts_does_not_leave_the_nodes_memory_unknown_for_good(tmp_path):
    """A GPU lost at the sampler's start (a restart after a crash, a node booted with it fallen off
    the bus) left the node's smallest GPU unknown in every heartbeat until the sampler was restarted,
    even once the GPU was reset: GPU packing was off in every partition of the node."""
    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url)
    nvml = FakeNvml([{"util": 0, "mem_util": 0, "procs": {}, "total_mib": 24576} for _ in range(4)],
                    fail={"nvmlDeviceGetHandleByIndex:3": NVMLError_GpuIsLost})
    clock = Clock(10_000.0)
    svc = SamplerService(cfg, nvml, store, str(tmp_path), clock=clock, sleep=lambda s: None)
    svc.start()
    svc.step()
    assert store.gpu_nodes()["gpu01"].gpu_memory_mib is None  # unknown while it cannot be read: right
    del nvml.fail["nvmlDeviceGetHandleByIndex:3"]  # reset: readable again
    for _ in range(ns.LOST_RETRY_READINGS + 15):  # past the lost GPU's rest, and a heartbeat after it
        clock.t += 5
        svc.step()
    assert store.gpu_nodes()["gpu01"].gpu_memory_mib == 24576
    nvml.fail["nvmlDeviceGetHandleByIndex:2"] = NVMLError_GpuIsLost  # lost after it was read: same memory
    for _ in range(15):
        clock.t += 5
        svc.step()
    assert store.gpu_nodes()["gpu01"].gpu_memory_mib == 24576
