"""bench/nvml_on_gpu.py, the tool that runs the sampler and the packing test on a real GPU, run here
without one: NVML is tests/profiler/fake_nvml.py (listing as a GPU's processes those with
SLURM_JOB_ID in their environment, as a GPU shows a job's CUDA processes) and PyTorch a stub, so the
tool's own plumbing (stand-in jobs, the sampler service, the read-back, the report) cannot rot
between the sessions that have a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAKE_PYNVML = r'''
import os, sys
from types import SimpleNamespace
sys.path.insert(0, os.environ["LUCIDD_REPO"])
from tests.profiler.fake_nvml import *  # noqa: F401,F403 - the error classes and constants
from tests.profiler import fake_nvml as _f
_fake = _f.FakeNvml([{"util": 12, "mem_util": 5, "procs": {}}])


def _job_processes():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if b"SLURM_JOB_ID=" in f.read():
                        out[int(d)] = 2 << 30
            except OSError:
                pass
    return out


def __getattr__(name):
    if name.startswith("nvmlDeviceGetComputeRunningProcesses"):
        _fake.gpus[0]["procs"] = _job_processes()
    return getattr(_fake, name)


def nvmlDeviceGetName(handle):
    return "FakeGPU"


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(total=24 << 30)
'''

FAKE_TORCH = r'''
import time


class _Cuda:
    def synchronize(self):
        pass


cuda = _Cuda()
bfloat16 = uint8 = None


def device(name):
    return name


class _Tensor:
    def __matmul__(self, other):
        time.sleep(0.001)
        return self


def empty(*args, **kw):
    return _Tensor()


def randn(*args, **kw):
    return _Tensor()
'''


def test_the_gpu_check_runs_end_to_end_on_stand_ins(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), LUCIDD_REPO=str(REPO))
    # readings every 0.1 s over 2 s phases: a loaded CI machine once gave 2 readings in a 1 s phase
    # at 0.5 s, fewer than the 3 that judging a job needs
    r = subprocess.run([sys.executable, str(REPO / "bench" / "nvml_on_gpu.py"), "--seconds", "2",
                        "--interval", "0.1", "--alone", "tiny", "--pairs", "tiny+medium"], env=env, capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    # the profiling runs were found by the real sampler service, read back as lucidd reads them, judged
    assert "job 101 (tiny): samples" in out and "job 102 (medium): samples" in out, out
    assert "heartbeat (table gpu_nodes): 1 GPU(s) FakeGPU, the smallest 24,576 MiB" in out, out
    assert "SM utilisation 12 %" in out and "Tiny (Tiny below 15 %" in out and "may share" in out, out
    # the pair's rows hold memory only, and the pair's speeds are reported
    assert "job 201 (main)" in out and "tiny + medium:" in out, out
    assert "one sampler reading" in out, out


def _pid_namespace_allowed(*more) -> bool:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    try:
        return subprocess.run(["unshare", *user, "--pid", "--fork", *more, "true"],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def test_the_gpu_check_finds_jobs_in_pid_namespaces_of_their_own(tmp_path):
    """--pid-namespaces: stand-ins in PID namespaces of their own (as in a container) are still found
    by the sampler on the host, and a sampler in a namespace of its own warns. Where this machine
    cannot make a PID namespace, the tool says so and stops (exit 2) instead of reporting nothing."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), LUCIDD_REPO=str(REPO))
    r = subprocess.run([sys.executable, str(REPO / "bench" / "nvml_on_gpu.py"), "--seconds", "2",
                        "--interval", "0.1", "--alone", "tiny,medium", "--pairs", "", "--pid-namespaces"], env=env,
                       capture_output=True, text=True, timeout=240)
    out = r.stdout
    if not _pid_namespace_allowed("--mount-proc"):
        assert r.returncode == 2 and "cannot start a PID namespace here" in out, out + r.stderr
        return
    assert r.returncode == 0, out + r.stderr
    assert "their PIDs in their own namespaces [1]" in out, out
    assert "job 101 (tiny): samples" in out and "job 102 (medium): samples" in out, out
    assert "lucidd-sampler --once in a PID namespace of its own: 0" in out, out
    assert "runs in a PID namespace of its own" in out, out
