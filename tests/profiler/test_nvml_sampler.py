"""The NVML sampler (profiler/nvml_sampler.py, profiler/sampler_main.py) against a fake NVML with
the real module's interface, a fake /proc, and a real database (SQLite here; PostgreSQL in
tests/live/test_store.py's tier)."""

from __future__ import annotations

import logging

import pytest

from lucidd.live.config import config_from_dict
from lucidd.live.store import Store, StoreError
import profiler.nvml_sampler as ns
from profiler.nvml_sampler import MIB, Sampler, SamplerError, in_host_pid_namespace, job_of_pid, load_nvml, \
    process_record_problem, read_gpus
from profiler.sampler_main import SamplerService, main
from tests.profiler import fake_nvml as fk
from tests.profiler.fake_nvml import FakeNvml, NVMLError_GpuIsLost, NVMLError_LibraryNotFound, \
    NVMLError_NotSupported, fake_proc

GIB = 1024 * MIB


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """main() sets the root logger's handler to the stderr of its test (closed afterwards): later
    tests' log lines would go to a closed file ("--- Logging error ---")."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


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
    used = [n for n in dir(FakeNvml) if n.startswith("nvml") or n.startswith("NVML")]
    assert [n for n in used if not hasattr(pynvml, n)] == []
    errors = [n for n in dir(fk) if n.startswith("NVMLError_")]
    assert {n: fk.__dict__[n]().value for n in errors} == {n: getattr(pynvml, n)().value for n in errors}
    assert pynvml.NVML_DEVICE_MIG_ENABLE == fk.NVML_DEVICE_MIG_ENABLE
    # what the sampler relies on: the mismatch error is no NVMLError, so it must be caught by name
    if hasattr(pynvml, "NVMLLibraryMismatchError"):
        assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    assert process_record_problem(pynvml) is None  # the installed nvidia-ml-py reads the driver's records
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
    # a node taken out a day ago (its clock as this one's: its heartbeat gives the same offset)
    store.save_gpu_node("gone1", int(clock.t) - 86400 - 10, 8, 24576.0, clock_offset_s=svc.clock_offset_s)
    svc.last_prune = 0
    clock.t += 3600
    svc.step()
    assert store.gpu_profiles(101) == [] and svc.sampler.profiles == {}
    assert list(store.gpu_nodes()) == ["gpu01"]


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
    err = [ln for ln in capsys.readouterr().err.splitlines() if " WARNING " not in f" {ln}"]
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
        "nodes": 2, "nodes_last_10_min": 1, "last_reading_age_s": 100.0,
        # the heartbeats: gpu01's last is 1,100 s old
        "heartbeat_nodes": 2, "silent_nodes": ["gpu01"], "gpu_memory_mib": {"smallest": 24576.0, "largest": 24576.0}}


# ------------------------------------------------------------------------------------------------
# Real NVML behaviour: process query versions, errors of every kind, lost GPUs, MIG


def test_a_driver_before_510_with_recent_nvidia_ml_py_neither_crashes_nor_loses_processes(proc, caplog):
    """nvidia-ml-py 13's unversioned nvmlDeviceGetComputeRunningProcesses raises
    NVMLLibraryMismatchError (no NVMLError) where the driver lacks _v3: the sampler asks _v3, then
    _v2, by name."""
    nvml = FakeNvml(node_gpus(), old_driver=True)
    with pytest.raises(fk.NVMLLibraryMismatchError):
        nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(0))
    readings = read_gpus(nvml, {})
    assert [g.processes for g in readings] == [g["procs"] for g in node_gpus()]
    assert "nvmlDeviceGetComputeRunningProcesses_v2:1" in nvml.calls

    class Nvml12535(FakeNvml):  # nvidia-ml-py 12.535.108..12.x: no _v2 at all
        nvmlDeviceGetComputeRunningProcesses_v2 = None

    errors = {}
    s = Sampler(Nvml12535(node_gpus(), old_driver=True), "gpu01", str(proc))
    s.start()
    s.errors = errors
    with caplog.at_level(logging.WARNING, logger="lucidd.sampler"):
        assert s.sample(1) == 0  # no processes: no job, but no crash either
    assert all("does not match" in k for k in errors) and len(errors) == 3


@pytest.mark.parametrize("error", [fk.NVMLError_NoPermission, fk.NVMLError_Unknown, fk.NVMLError_Timeout,
                                   fk.NVMLError_InsufficientSize, fk.NVMLError_NotSupported,
                                   fk.NVMLError_Uninitialized, fk.NVMLLibraryMismatchError])
@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMigMode",
                                  "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses_v3"])
def test_one_gpu_failing_in_any_way_leaves_the_others_figures(proc, call, error):
    nvml = FakeNvml(node_gpus(), fail={f"{call}:0": error})
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    s.sample(1)
    b = s.profiles[(202, "main")]  # GPU 1's job
    assert (b.gpu_util, b.gmem_util, b.gmem_max_mib, b.samples) == (20, 10, 2048, 1)
    if call == "nvmlDeviceGetMigMode":  # cannot say: taken as not in MIG mode
        assert s.profiles[(101, "profiling")].gpu_util == 80
    assert len(s.errors) <= 1


def test_a_node_whose_driver_went_away_gives_an_empty_reading(proc):
    s = Sampler(FakeNvml(node_gpus()), "gpu01", str(proc))
    s.start()
    s.nvml.fail["nvmlDeviceGetCount"] = fk.NVMLError_DriverNotLoaded
    assert s.sample(1) == 0 and list(s.errors) == ["nvmlDeviceGetCount: Driver Not Loaded"]


@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMigMode",
                                  "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses_v3"])
def test_a_lost_gpu_is_left_alone_for_a_while_then_tried_again(proc, monkeypatch, caplog, call):
    monkeypatch.setattr(ns, "LOST_RETRY_READINGS", 3)
    nvml = FakeNvml(node_gpus(), fail={f"{call}:0": NVMLError_GpuIsLost})
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    nvml.calls.clear()  # start() asks each GPU once for its memory: only the readings count here
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lucidd.sampler"):
        for t in range(8):  # lost at 0, left out at 1-3, lost again at 4, left out at 5-7
            s.sample(t)
    assert nvml.calls.count("nvmlDeviceGetHandleByIndex:0") == 2
    assert nvml.calls.count("nvmlDeviceGetHandleByIndex:1") == 8  # the others read every time
    assert s.profiles[(202, "main")].samples == 8 and (101, "profiling") not in s.profiles
    assert len([r for r in caplog.records if "GPU is lost" in r.getMessage()]) == 1
    del nvml.fail[f"{call}:0"]  # reset: back
    for t in range(8, 12):
        s.sample(t)
    assert s.profiles[(101, "profiling")].samples == 4 and s.lost == {}  # tried again at 8, and read


def test_a_gpu_in_mig_mode_gives_memory_only_and_no_false_utilisation(proc, caplog):
    """MIG on: nvmlDeviceGetUtilizationRates has no figure (NotSupported), so it is not asked; the
    parent's process list has the processes of every instance (as root), each with its memory."""
    gpus = [{"util": 0, "mem_util": 0, "mig": True, "procs": {100: 5 * GIB}},            # one job on an instance
            {"util": 0, "mem_util": 0, "mig": True, "procs": {110: 1 * GIB, 200: 2 * GIB}},  # two jobs, two instances
            {"util": 30, "mem_util": 3, "mig": None, "procs": {200: 1 * GIB}}]            # a GPU without MIG
    nvml = FakeNvml(gpus)
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    with caplog.at_level(logging.INFO, logger="lucidd.sampler"):
        s.sample(1)
        s.sample(2)
    assert "nvmlDeviceGetUtilizationRates:0" not in nvml.calls and "nvmlDeviceGetUtilizationRates:1" not in nvml.calls
    a, b = s.profiles[(101, "profiling")], s.profiles[(202, "main")]
    assert (a.gpu_util, a.gmem_util, a.gmem_max_mib, a.gpus) == (None, None, 5 * 1024, {0, 1})
    assert (b.gpu_util, b.gmem_max_mib, b.gpus) == (30, 2 * 1024, {1, 2})  # utilisation of GPU 2 only
    mig = [r for r in caplog.records if "MIG mode" in r.getMessage()]
    assert len(mig) == 2 and all(r.levelno == logging.INFO for r in mig)  # once per GPU, not a warning
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_nvidia_ml_py_that_misreads_process_records_does_not_start(tmp_path, capsys, monkeypatch):
    """nvidia-ml-py 12.535.77 reads 32-byte records (usedGpuCcProtectedMemory) where drivers from
    535.98 on write 24-byte ones: every pid after the first would be garbage, and a garbage pid is
    some other process's."""

    class Struct:
        def __init__(self, *names):
            self._fields_ = [(n, int) for n in names]

    class Nvml12535_77(FakeNvml):  # noqa: N801
        c_nvmlProcessInfo_t = Struct("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId",
                                     "usedGpuCcProtectedMemory")

    class Nvml13(FakeNvml):
        c_nvmlProcessInfo_v3_t = c_nvmlProcessInfo_t = Struct("pid", "usedGpuMemory", "gpuInstanceId",
                                                              "computeInstanceId")

    assert process_record_problem(Nvml13()) is None and process_record_problem(FakeNvml()) is None
    bad = Nvml12535_77(node_gpus())
    with pytest.raises(SamplerError, match="nvidia-ml-py 12.535.108 or later"):
        Sampler(bad, "gpu01").start()
    assert not bad.initialised  # shut down again
    import profiler.sampler_main as sm

    cfgfile = tmp_path / "lucidd.toml"
    cfgfile.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    monkeypatch.setattr(sm, "load_nvml", lambda: Nvml12535_77(node_gpus()))
    assert main(["--config", str(cfgfile), "--once"]) == 3
    err = [ln for ln in capsys.readouterr().err.splitlines() if " WARNING " not in f" {ln}"]
    assert len(err) == 1 and "12.535.108" in err[0]


@pytest.mark.parametrize("error, text", [(fk.NVMLError_DriverNotLoaded, "Driver Not Loaded"),
                                         (fk.NVMLError_NoPermission, "Insufficient Permissions"),
                                         (fk.NVMLError_Unknown, "Unknown Error")])
def test_every_init_failure_is_one_line_and_exit_3(tmp_path, capsys, monkeypatch, error, text):
    import profiler.sampler_main as sm

    cfgfile = tmp_path / "lucidd.toml"
    cfgfile.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    monkeypatch.setattr(sm, "load_nvml", lambda: FakeNvml(fail={"nvmlInit": error}))
    assert main(["--config", str(cfgfile)]) == 3
    err = [ln for ln in capsys.readouterr().err.splitlines() if " WARNING " not in f" {ln}"]
    assert len(err) == 1 and text in err[0]


def test_no_pynvml_module_is_a_sampler_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(SamplerError, match="nvidia-ml-py"):
        load_nvml()


# ------------------------------------------------------------------------------------------------
# /proc: cgroup layouts and odd cases


@pytest.mark.parametrize("cgroup, job", [
    # cgroup v2, Slurm 22.05+: batch step, a numbered step, the extern step (pam_slurm_adopt)
    ("0::/system.slice/slurmstepd.scope/job_123/step_batch/user/task_0\n", 123),
    ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_3\n", 123),
    ("0::/system.slice/slurmstepd.scope/job_123/step_extern/user/task_special\n", 123),
    # several slurmd on one host: the scope is named after the node
    ("0::/system.slice/gpu01_slurmstepd.scope/job_77/step_0/user/task_0\n", 77),
    # cgroup v1, and a hybrid host whose first lines are systemd's
    ("12:memory:/slurm/uid_1000/job_123/step_0/task_0\n", 123),
    ("1:name=systemd:/system.slice/slurmd.service\n0::/system.slice/slurmd.service\n"
     "7:devices:/slurm/uid_1000/job_55/step_0\n", 55),
    ("4:cpuset:/slurm_gpu01/uid_0/job_9/step_extern\n", 9),
    # not a job's: slurmstepd's own cgroup, a user's unit that happens to say job_N, a login session
    ("0::/system.slice/slurmstepd.scope/system\n", None),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_12.scope\n", None),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("", None),
])
def test_job_from_every_cgroup_layout(tmp_path, cgroup, job):
    fake_proc(tmp_path, 42, cgroup=cgroup, partition="main")
    assert job_of_pid(42, str(tmp_path)) == ((job, "main") if job else (None, ""))


def test_proc_files_that_cannot_be_read(tmp_path, monkeypatch):
    import builtins

    fake_proc(tmp_path, 10, job=5, partition="main", env_job=5)
    fake_proc(tmp_path, 11, job=6, partition="main", env_job=6)
    real_open = builtins.open

    def guarded(path, *a, **k):
        if str(path).endswith("10/cgroup") or str(path).startswith(str(tmp_path / "11")):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", guarded)
    assert job_of_pid(10, str(tmp_path)) == (5, "main")  # the environment still says
    assert job_of_pid(11, str(tmp_path)) == (None, "")  # neither readable: nobody's
    (tmp_path / "12").mkdir()  # a process that ended while its directory was read
    assert job_of_pid(12, str(tmp_path)) == (None, "")


def test_an_environment_of_another_job_gives_no_partition(tmp_path):
    """The cgroup says the job; SLURM_JOB_PARTITION is the run's only when the environment is of
    the same job (`srun --jobid=B` from inside job A carries A's variables into B's cgroup)."""
    fake_proc(tmp_path, 50, job=7, env_job=8, partition="profiling")
    fake_proc(tmp_path, 51, job=7, env_job=7, partition="profiling")
    assert job_of_pid(50, str(tmp_path)) == (7, "")
    assert job_of_pid(51, str(tmp_path)) == (7, "profiling")


def test_a_sampler_outside_the_hosts_pid_namespace_says_so(tmp_path, caplog):
    host, container = tmp_path / "host", tmp_path / "container"
    for root, ns_name in ((host, "pid:[4026531836]"), (container, "pid:[4026532712]")):
        (root / "self" / "ns").mkdir(parents=True)
        (root / "self" / "ns" / "pid").symlink_to(ns_name)
    assert in_host_pid_namespace(str(host)) and not in_host_pid_namespace(str(container))
    assert in_host_pid_namespace(str(tmp_path / "nothing"))  # cannot tell: no warning
    with caplog.at_level(logging.WARNING, logger="lucidd.sampler"):
        Sampler(FakeNvml(node_gpus()), "gpu01", str(host)).start()
        assert not [r for r in caplog.records if "PID namespace" in r.getMessage()]
        Sampler(FakeNvml(node_gpus()), "gpu01", str(container)).start()
    assert len([r for r in caplog.records if "PID namespace" in r.getMessage()]) == 1


def test_the_nodes_gpus_are_read_once_and_the_smallest_memory_kept(proc):
    gpus = node_gpus()
    gpus[0].update(total_mib=81559, name="NVIDIA A100-SXM4-80GB")
    gpus[1].update(total_mib=40960, name="NVIDIA A100-SXM4-40GB")
    gpus[2].update(total_mib=81559, name="NVIDIA A100-SXM4-80GB")
    s = Sampler(FakeNvml(gpus), "gpu01", str(proc))
    s.start()
    g = s.gpus
    assert (g.count, g.gpu_memory_mib, g.name, g.driver, g.problem) == (
        3, 40960.0, "NVIDIA A100-SXM4-80GB + NVIDIA A100-SXM4-40GB", "535.183.01", "")


def test_a_gpu_whose_memory_cannot_be_read_leaves_the_smallest_unknown(proc):
    # packing must not take the other GPUs' memory for the node's smallest
    s = Sampler(FakeNvml(node_gpus(), fail={"nvmlDeviceGetMemoryInfo:1": NVMLError_NotSupported}), "gpu01", str(proc))
    s.start()
    assert s.gpus.count == 3 and s.gpus.gpu_memory_mib is None and "GPU 1" in s.gpus.problem
    s.stop()
    s = Sampler(FakeNvml(node_gpus(), fail={"nvmlDeviceGetCount": fk.NVMLError_DriverNotLoaded}), "gpu01", str(proc))
    s.start()  # the sampler still starts: a reading may work later
    assert s.gpus.count is None and s.gpus.gpu_memory_mib is None and "count" in s.gpus.problem


def test_the_service_writes_a_heartbeat_at_most_once_a_minute(tmp_path, proc):
    cfg = _cfg(tmp_path, flush_s=5.0)
    store = Store(cfg.database.url)
    assert store.gpu_nodes() == {}  # no table yet: no sampler has said anything
    clock = Clock(10_000.0)
    nvml = FakeNvml(node_gpus())
    svc = SamplerService(cfg, nvml, store, str(proc), clock=clock, sleep=lambda s: None)
    svc.start()
    svc.step()
    row = store.gpu_nodes()["gpu01"]
    assert (row.seen_at, row.gpus, row.gpu_memory_mib, row.gpu_name) == (10_000, 3, 24576.0, "FakeGPU")
    nvml.gpus[:] = [dict(g, procs={}) for g in nvml.gpus]  # the node goes idle: its heartbeat goes on
    for _ in range(12):
        clock.t += 5
        svc.step()
    assert store.gpu_nodes()["gpu01"].seen_at == 10_060

    def dead(*_a, **_kw):
        raise StoreError("database sqlite:///x unavailable (session): connection refused")

    store.save_gpu_node = dead
    clock.t += 60
    assert not svc.step()  # a failed heartbeat is a failed step, logged; the sampler goes on


# -- a review of the sampler's figures for packing (2 December 2026): each case let a job that needs
# most of a GPU look as if it needed less, and GPU packing trusts that figure


def test_a_process_of_the_job_without_its_partition_counts_for_the_jobs_run(tmp_path):
    """A helper started with a cleared environment (`apptainer --cleanenv`, `env -i`) has no
    SLURM_JOB_PARTITION: keyed (job, "") apart from the job's run, the job looked like two jobs
    sharing its GPU (no utilisation) and its profiling row had only part of its memory."""
    root = tmp_path / "proc"
    fake_proc(root, 100, job=101, partition="profiling")
    fake_proc(root, 101, job=101, partition=None)  # same cgroup, no partition in its environment
    nvml = FakeNvml([{"util": 90, "mem_util": 50, "procs": {100: 2 * GIB, 101: 14 * GIB}}])
    s = Sampler(nvml, "gpu01", str(root))
    s.start()
    for t in range(4):
        s.sample(1000 + 5 * t)
    nvml.gpus[0]["procs"] = {101: 14 * GIB}  # a reading with the helper alone: the run seen last
    s.sample(1020)
    assert list(s.profiles) == [(101, "profiling")]
    p = s.profiles[(101, "profiling")]
    assert (p.gmem_mib, p.util_samples, p.gpu_util, p.samples) == (16 * 1024, 5, 90, 5)


def test_memory_partly_unknown_in_a_reading_is_unknown_for_the_run(proc):
    """NVML could not tell one process's memory (usedGpuMemory None): the known part alone was
    kept as the run's peak, an under-count packing would trust."""
    nvml = FakeNvml([{"util": 50, "mem_util": 5, "procs": {100: None, 110: 1 * GIB}}])
    s = Sampler(nvml, "gpu01", str(proc))
    s.start()
    s.sample(1)
    nvml.gpus[0]["procs"] = {100: 3 * GIB, 110: 1 * GIB}  # known at a later reading: still unknown
    s.sample(6)
    p = s.profiles[(101, "profiling")]
    assert p.gmem_mib is None and p.gpu_util == 50


def test_a_run_forgotten_and_seen_again_keeps_its_memory_peak(tmp_path, proc):
    """The sampler forgets a run not seen for 3 x flush_s (a CPU phase, a second script) and starts
    it afresh when it comes back: the write replaced the row, and a job that held 20 GiB of a
    24 GiB GPU was let share it (one shard)."""
    from types import SimpleNamespace

    from binder.live import LivePackingConfig, shard_decision

    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url)
    nvml = FakeNvml([{"util": 10, "mem_util": 5, "procs": {100: 20 * GIB}}])
    clock = Clock(10_000.0)
    svc = SamplerService(cfg, nvml, store, str(proc), clock=clock, sleep=lambda s: None)
    svc.start()
    for phase in ({100: 20 * GIB}, {}, {110: 2 * GIB}):  # 2 min at 20 GiB, 2 min without, 2 min at 2 GiB
        nvml.gpus[0]["procs"] = phase
        for _ in range(24):
            svc.step()
            clock.t += 5
    clock.t += 30
    svc.step()
    assert (101, "profiling") in svc.sampler.profiles  # seen again, afresh
    (row,) = store.gpu_profiles(101)
    assert row.gmem_mib == 20 * 1024 and row.first_t == 10_000
    assert row.util_samples == 25  # the utilisation of the longer record (24 readings, then 25)
    profile = store.profiling_gpu_profiles([101], "profiling")[101]
    shards, why = shard_decision(SimpleNamespace(job_id=101, time_limit_s=None), "main", profile, {"main": 999},
                                 LivePackingConfig(gpu_memory_mib=24576))
    assert shards == 2, why
    svc.step()  # written again with the same figures: the row is unchanged
    clock.t += 30
    svc.step()
    assert store.gpu_profiles(101)[0].gmem_mib == 20 * 1024


def test_lucidd_reads_the_most_memory_any_row_of_a_run_held(tmp_path):
    """A job's profile is its row with the most utilisation readings (it ran on several nodes, or
    restarted): that row's memory alone passed over a larger figure in another row."""
    from profiler.nvml_sampler import JobGpuProfile

    store = Store(f"sqlite:///{tmp_path}/lucidd.db").create()
    store.create_gpu_profiles()
    big = JobGpuProfile(7, "profiling", "gpu1", 100, 120, samples=4, util_samples=4, gpu_util_sum=40.0,
                        gmem_util_sum=8.0, gmem_max_mib=20480.0, gpus={0})
    long = JobGpuProfile(7, "profiling", "gpu2", 200, 300, samples=9, util_samples=9, gpu_util_sum=90.0,
                         gmem_util_sum=9.0, gmem_max_mib=3000.0, gpus={1})
    store.save_gpu_profiles([big, long])
    p = store.profiling_gpu_profiles([7], "profiling")[7]
    assert (p.node, p.util_samples, p.gmem_mib) == ("gpu2", 9, 20480.0)
    assert store.gpu_profiles(7)[1].gmem_mib == 3000.0  # what was read is not written back
    unknown = JobGpuProfile(7, "profiling", "gpu3", 300, 310, samples=1, util_samples=1, gpu_util_sum=5.0,
                            gmem_util_sum=1.0, gmem_unknown=True, gpus={0})
    store.save_gpu_profiles([unknown])
    assert store.profiling_gpu_profiles([7], "profiling")[7].gmem_mib is None
    # a row of no partition (a helper seen before any process naming it) on a node of the run
    helper = JobGpuProfile(8, "", "gpu1", 90, 95, samples=1, gmem_max_mib=22000.0, gpus={0})
    run = JobGpuProfile(8, "profiling", "gpu1", 100, 120, samples=4, util_samples=4, gpu_util_sum=40.0,
                        gmem_util_sum=8.0, gmem_max_mib=2000.0, gpus={0})
    elsewhere = JobGpuProfile(8, "", "gpu9", 90, 95, samples=1, gmem_max_mib=30000.0, gpus={0})
    store.save_gpu_profiles([helper, run, elsewhere])
    assert store.profiling_gpu_profiles([8], "profiling")[8].gmem_mib == 22000.0


def test_a_failed_flush_feeds_the_watchdog_and_the_heartbeat_waits(tmp_path, proc, monkeypatch):
    """Each write may wait for the database's connect timeout (the sampler's own, at most 10 s): a
    step's two writes with no watchdog ping between them outlasted WatchdogSec=120s with
    [slurm] command_timeout_s from 60 s, and systemd killed the sampler with the figures it kept."""
    import profiler.sampler_main as sm

    cfg = _cfg(tmp_path)
    store = Store(cfg.database.url)
    svc = SamplerService(cfg, FakeNvml(node_gpus()), store, str(proc), clock=Clock(10_000.0), sleep=lambda s: None)
    svc.start()
    calls = []
    monkeypatch.setattr(svc.notifier, "watchdog", lambda: calls.append("watchdog"))

    def dead(*_a, **_kw):
        calls.append("write")
        raise StoreError("database postgresql://x unavailable (session): connection timeout expired")

    store.save_gpu_profiles = store.save_gpu_node = dead
    assert not svc.step()
    assert calls == ["write", "watchdog", "watchdog"]  # the flush, then no heartbeat right after it
    calls.clear()
    svc.clock.t += 5
    svc.step()  # no flush due: the heartbeat is tried
    assert calls == ["write", "watchdog"]
    assert sm.DATABASE_TIMEOUT_S <= 10


def test_an_earlier_job_of_the_same_id_lends_its_gpu_figures_to_no_one(tmp_path):
    """slurmctld lost its state and gave job id 9 again: the earlier job's rows (one on another node,
    one on the node the new job runs on, its readings added to the old row) were read as the new
    job's profile, and its packing weighed another job's memory."""
    from profiler.nvml_sampler import JobGpuProfile

    def run(job, node, first, last, mib):  # a run of `last - first` s at 10 % utilisation, 5 s readings
        n = (last - first) // 5
        return JobGpuProfile(job, "profiling", node, first, last, samples=n, util_samples=n, gpu_util_sum=10.0 * n,
                             gmem_util_sum=1.0 * n, gmem_max_mib=mib, gpus={0})

    store = Store(f"sqlite:///{tmp_path}/lucidd.db").create()
    store.create_gpu_profiles()
    store.save_gpu_profiles([run(9, "gpu2", 1_000, 1_200, 30000.0), run(9, "gpu1", 1_000, 90_100, 30000.0)])
    assert store.profiling_gpu_profiles([9], "profiling")[9].gmem_mib == 30000.0  # no record given: all rows
    assert 9 not in store.profiling_gpu_profiles([9], "profiling", since={9: 90_000})
    store.save_gpu_profiles([run(9, "gpu3", 90_010, 90_100, 2000.0)])
    p = store.profiling_gpu_profiles([9], "profiling", since={9: 90_000})[9]
    assert (p.node, p.gmem_mib) == ("gpu3", 2000.0)
    # a run read a little before lucidd first saw its job (lucidd restarted while it ran) is its own
    store.save_gpu_profiles([run(10, "gpu1", 89_900, 90_100, 4000.0)])
    assert store.profiling_gpu_profiles([10], "profiling", since={10: 90_000})[10].gmem_mib == 4000.0
