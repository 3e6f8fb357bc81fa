"""The NVML sampler (profiler/nvml_sampler.py, profiler/sampler_main.py) against a fake NVML with
the real module's interface, a fake /proc, and a real database (SQLite here; PostgreSQL in
tests/live/test_store.py's tier)."""

from __future__ import annotations

import logging

import pytest

from lucidd.live.config import config_from_dict
from lucidd.live.store import Store, StoreError
from profiler.nvml_sampler import MIB, Sampler, SamplerError, job_of_pid, read_gpus
from profiler.sampler_main import SamplerService, main
from tests.profiler.fake_nvml import FakeNvml, NVMLError_GpuIsLost, NVMLError_LibraryNotFound, \
    NVMLError_NotSupported, fake_proc

GIB = 1024 * MIB


@pytest.fixture
def proc(tmp_path):
    root = tmp_path / "proc"
    fake_proc(root, 100, job=101, partition="profiling")
    fake_proc(root, 110, job=101, partition="profiling", cgroup_v2=False)
    fake_proc(root, 200, job=202, partition="main")
    fake_proc(root, 300)  # not a Slurm job's (a user's shell on the node)
    return root


def node_gpus():
    return [{"util": 80, "mem_util": 40, "procs": {100: 3 * GIB, 110: 1 * GIB}},   # job 101's, two processes
            {"util": 20, "mem_util": 10, "procs": {200: 2 * GIB, 300: 5 * GIB}},   # job 202's and a non-job process
            {"util": 0, "mem_util": 0, "procs": {}}]                                # idle


def test_job_of_a_process_from_its_cgroup_or_environment(proc):
    assert job_of_pid(100, str(proc)) == (101, "profiling")
    assert job_of_pid(110, str(proc)) == (101, "profiling")  # cgroup v1 layout
    assert job_of_pid(300, str(proc)) == (None, "")
    fake_proc(proc, 400, env_job=404, partition="main")  # no job cgroup (proctrack/linuxproc): environment
    assert job_of_pid(400, str(proc)) == (404, "main")
    assert job_of_pid(999, str(proc)) == (None, "")  # ended before it was read


def test_figures_per_job_over_readings(proc):
    nvml = FakeNvml(node_gpus())
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    assert s.sample(1000) == 2
    nvml.gpus[0].update(util=60, mem_util=20)
    nvml.gpus[0]["procs"][100] = 5 * GIB
    s.sample(1005)
    a = s.profiles[(101, "profiling")]
    assert (a.samples, a.first_t, a.last_t, a.gpus) == (2, 1000, 1005, {0})
    assert a.gpu_util == 70 and a.gmem_util == 30
    assert a.gmem_max_mib == 6 * 1024  # both processes on GPU 0 at the second reading
    b = s.profiles[(202, "main")]
    assert (b.gpu_util, b.gmem_max_mib) == (20, 2 * 1024)  # the shell's 5 GiB is nobody's job
    assert {p.job_id for p in s.take_changes()} == {101, 202} and s.take_changes() == []


def test_a_gpu_two_jobs_share_gives_them_memory_only(proc):
    gpus = [{"util": 90, "mem_util": 50, "procs": {100: 1 * GIB, 200: 2 * GIB}}]
    s = Sampler(FakeNvml(gpus), "gpu01", str(proc))
    s.start()
    s.sample(1)
    for key, mib in (((101, "profiling"), 1024), ((202, "main"), 2048)):
        p = s.profiles[key]
        assert p.gpu_util is None and p.gmem_max_mib == mib and p.samples == 1


def test_nvml_errors_skip_the_gpu_or_the_figure_and_are_logged_once(proc, caplog):
    nvml = FakeNvml(node_gpus(), fail={"nvmlDeviceGetHandleByIndex:1": NVMLError_GpuIsLost,
                                       "nvmlDeviceGetUtilizationRates:0": NVMLError_NotSupported})
    errors = {}
    with caplog.at_level(logging.WARNING, logger="lucidd.sampler"):
        for _ in range(3):
            readings = read_gpus(nvml, errors)
    assert [g.index for g in readings] == [0, 2]
    assert readings[0].gpu_util is None and readings[0].processes == {100: 3 * GIB, 110: GIB}
    assert sorted(errors.values()) == [3, 3]
    assert len([r for r in caplog.records if "GPU is lost" in r.getMessage()]) == 1
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    s.sample(1)
    p = s.profiles[(101, "profiling")]
    assert p.gpu_util is None and p.gmem_max_mib == 4 * 1024  # memory still measured


def test_unknown_memory_and_an_old_driver(proc):
    gpus = [{"util": 50, "mem_util": 5, "procs": {100: None}}]  # usedGpuMemory None (no privilege, WDDM)
    nvml = FakeNvml(gpus, old_driver=True)  # no _v3 entry point: the _v2 call instead
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    s.sample(1)
    p = s.profiles[(101, "profiling")]
    assert p.gpu_util == 50 and p.gmem_max_mib is None
    assert "nvmlDeviceGetComputeRunningProcesses_v2:0" in nvml.calls


def test_nvml_that_cannot_start_is_one_clear_error():
    with pytest.raises(SamplerError, match="NVML cannot start on gpu01: NVML Shared Library Not Found"):
        Sampler(FakeNvml(fail={"nvmlInit": NVMLError_LibraryNotFound}), "gpu01").start()


def test_the_fake_has_the_real_modules_interface():
    """The fake stands in for pynvml only while its calls are pynvml's (nvidia-ml-py, in the test
    extra); and on this machine without a GPU the real module fails the way the fake is told to."""
    pynvml = pytest.importorskip("pynvml")
    used = [n for n in dir(FakeNvml) if n.startswith("nvml") or n.startswith("NVMLError")]
    assert [n for n in used if not hasattr(pynvml, n)] == []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(SamplerError, match="NVML cannot start"):
            Sampler(pynvml, "here").start()
    else:  # a machine with a driver: the real readings have the fields the sampler reads
        try:
            for g in read_gpus(pynvml):
                assert all(isinstance(pid, int) for pid in g.processes)
        finally:
            pynvml.nvmlShutdown()


def _cfg(tmp_path, **sampler):
    return config_from_dict({"daemon": {"state_dir": str(tmp_path)},
                             "sampler": {"node": "gpu01", "flush_s": 30.0, "interval_s": 5.0, **sampler}})


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_the_service_writes_figures_and_keeps_them_while_the_database_is_down(tmp_path, proc):
    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url)
    clock = Clock(10_000.0)
    svc = SamplerService(cfg, FakeNvml(node_gpus()), store, str(proc), clock=clock, sleep=lambda s: None)
    svc.start()
    assert svc.step()  # first reading: written at once
    rows = store.gpu_profiles(101)
    assert [(r.partition, r.node, r.samples, r.gpus, r.gpu_util) for r in rows] == [("profiling", "gpu01", 1, "0", 80)]

    def dead(profiles):
        raise StoreError("database sqlite:///x unavailable (session): connection refused")

    live_save = store.save_gpu_profiles
    store.save_gpu_profiles = dead
    for _ in range(7):
        clock.t += 5
        svc.step()
    assert svc.unsaved, "the figures of the failed write are kept"
    store.save_gpu_profiles = live_save
    clock.t += 30
    assert svc.step() and not svc.unsaved
    r = store.gpu_profiles(101)[0]
    assert r.samples == 9 and r.last_t == int(clock.t)


def test_old_runs_are_pruned_and_forgotten(tmp_path, proc):
    cfg = _cfg(tmp_path, keep_days=1)
    store = Store(cfg.database.url)
    nvml = FakeNvml(node_gpus())
    clock = Clock(100_000.0)
    svc = SamplerService(cfg, nvml, store, str(proc), clock=clock, sleep=lambda s: None)
    svc.start()
    svc.step()
    nvml.gpus[:] = []  # every job ended
    clock.t += 2 * 86400
    svc.step()
    svc.last_prune = 0
    clock.t += 3600
    svc.step()
    assert store.gpu_profiles(101) == [] and svc.sampler.profiles == {}


def test_explain_shows_the_profiling_runs_gpu_use(tmp_path, proc, capsys):
    from lucidd.admin_cli import explain_data
    from lucidd.live.store import JobRow

    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url).create()
    with store.session() as s:
        s.add(JobRow(job_id=101, first_seen=1, original_submit=1, target_partition="main", gpus=1))
    svc = SamplerService(cfg, FakeNvml(node_gpus()), store, str(proc), clock=Clock(5000.0), sleep=lambda s: None)
    svc.start()
    svc.step()
    d = explain_data(cfg, store, "101")
    assert d["gpu_usage"] == [{"partition": "profiling", "node": "gpu01", "profiling_run": True, "first_t": 5000,
                               "last_t": 5000, "samples": 1, "gpus": "0", "gpu_util": 80.0, "gmem_util": 40.0,
                               "gmem_mib": 4096.0}]


def test_lucidd_sampler_once_without_a_gpu_exits_3_with_one_line(tmp_path, capsys, monkeypatch):
    import profiler.sampler_main as sm

    cfgfile = tmp_path / "lucidd.toml"
    cfgfile.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    monkeypatch.setattr(sm, "load_nvml", lambda: FakeNvml(fail={"nvmlInit": NVMLError_LibraryNotFound}))
    assert main(["--config", str(cfgfile), "--once"]) == 3
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("WARNING")]
    assert len(err) == 1 and err[0].startswith("lucidd-sampler: NVML cannot start") and "Library Not Found" in err[0]


def test_lucidd_sampler_once_prints_and_writes(tmp_path, capsys, monkeypatch, proc):
    import profiler.nvml_sampler as ns
    import profiler.sampler_main as sm

    cfgfile = tmp_path / "lucidd.toml"
    cfgfile.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n[sampler]\nnode = "gpu07"\n')
    monkeypatch.setattr(sm, "load_nvml", lambda: FakeNvml(node_gpus()))
    real = ns.job_of_pid
    monkeypatch.setattr(ns, "job_of_pid", lambda pid, proc_dir="/proc": real(pid, str(proc)))
    assert main(["--config", str(cfgfile), "--once"]) == 0
    out = capsys.readouterr().out
    assert "job 101 (profiling) on gpu07 GPUs [0]: gpu_util 80.0 %, gmem_util 40.0 %, gmem 4,096 MiB" in out
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}})
    assert [r.node for r in Store(cfg.database.url).gpu_profiles(202)] == ["gpu07"]


def test_a_database_url_that_cannot_work_is_one_line(tmp_path, capsys):
    cfgfile = tmp_path / "lucidd.toml"
    cfgfile.write_text('[database]\nurl = "nosuchdriver://x"\n')
    assert main(["--config", str(cfgfile), "--once"]) == 2
    assert "lucidd-sampler:" in capsys.readouterr().err


def test_the_loop_reads_every_interval_and_keeps_the_watchdog_fed(tmp_path, proc):
    cfg = _cfg(tmp_path, interval_s=25.0)
    clock = Clock(1000.0)
    slept = []

    def sleep(s):
        slept.append(s)
        clock.t += s
        if clock.t >= 1100:
            svc.stop_requested = True

    svc = SamplerService(cfg, FakeNvml(node_gpus()), Store(cfg.database.url), str(proc), clock=clock, sleep=sleep)
    svc.start()
    svc.loop()
    assert svc.sampler.profiles[(101, "profiling")].samples == 4  # at 1000, 1025, 1050, 1075
    assert max(slept) <= 10.0  # slices, so a long interval never outlasts WatchdogSec


def test_status_counts_the_nodes_whose_samplers_report(tmp_path, proc):
    from lucidd.admin_cli import status_data

    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url).create()
    for node, t in (("gpu01", 9_000.0), ("gpu02", 10_000.0)):
        c = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "sampler": {"node": node}})
        svc = SamplerService(c, FakeNvml(node_gpus()), store, str(proc), clock=Clock(t), sleep=lambda s: None)
        svc.start()
        svc.step()
    assert status_data(cfg, store, now=10_100.0)["gpu_samplers"] == {
        "nodes": 2, "nodes_last_10_min": 1, "last_reading_age_s": 100.0}
