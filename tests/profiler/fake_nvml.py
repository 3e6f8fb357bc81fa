"""A stand-in for the `pynvml` module (nvidia-ml-py) on machines without a GPU.

Same function names, arguments, return shapes and error classes as the real module, for the calls
profiler/nvml_sampler.py makes (tests/profiler/test_nvml_sampler.py checks the names against the
real module when it is installed): utilisation rates as an object with `.gpu` and `.memory` (%),
processes as objects with `.pid` and `.usedGpuMemory` (bytes, or None where the driver does not
say), the driver version as bytes. A test sets `gpus` and `fail` and reads `calls`.
"""

from __future__ import annotations

from types import SimpleNamespace


class NVMLError(Exception):
    def __init__(self, value=999):
        self.value = value
        super().__init__(value)

    def __str__(self):
        return _TEXT.get(self.value, f"Unknown Error ({self.value})")


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's names
    def __init__(self):
        super().__init__(12)


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    def __init__(self):
        super().__init__(15)


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    def __init__(self):
        super().__init__(3)


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    def __init__(self):
        super().__init__(13)


_TEXT = {3: "Not Supported", 12: "NVML Shared Library Not Found", 13: "Function Not Found", 15: "GPU is lost"}


class FakeNvml:
    """`gpus`: one dict per GPU: {"util": %, "mem_util": %, "procs": {pid: bytes or None}}.
    `fail`: call name (optionally "name:index") -> exception class to raise."""

    NVMLError = NVMLError
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound

    def __init__(self, gpus=None, fail=None, old_driver=False):
        self.gpus = gpus or []
        self.fail = dict(fail or {})
        self.old_driver = old_driver  # no _v3 process query (drivers before 510)
        self.calls = []
        self.initialised = False

    def _maybe_fail(self, name, index=None):
        self.calls.append(name if index is None else f"{name}:{index}")
        exc = self.fail.get(f"{name}:{index}") or self.fail.get(name)
        if exc is not None:
            raise exc()

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self._maybe_fail("nvmlInit")
        self.initialised = True

    def nvmlShutdown(self):  # noqa: N802
        self._maybe_fail("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):  # noqa: N802
        self._maybe_fail("nvmlSystemGetDriverVersion")
        return b"535.183.01"

    def nvmlDeviceGetCount(self):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetHandleByIndex", index)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetUtilizationRates", handle.index)
        g = self.gpus[handle.index]
        return SimpleNamespace(gpu=g["util"], memory=g["mem_util"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        if self.old_driver:
            self.calls.append(f"nvmlDeviceGetComputeRunningProcesses:{handle.index}")
            raise NVMLError_FunctionNotFound()
        self._maybe_fail("nvmlDeviceGetComputeRunningProcesses", handle.index)
        return self._procs(handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetComputeRunningProcesses_v2", handle.index)
        return self._procs(handle)

    def _procs(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[handle.index]["procs"].items()]


def fake_proc(root, pid, job=None, partition=None, cgroup_v2=True, env_job=None):
    """A /proc/PID with the cgroup line slurmd's cgroup plugin gives a task, and an environ."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    if job is not None:
        line = (f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n" if cgroup_v2 else
                f"4:memory:/slurm/uid_1000/job_{job}/step_0/task_0\n3:cpuset:/slurm/uid_1000/job_{job}/step_0\n")
    else:
        line = "0::/user.slice/user-1000.slice/session-3.scope\n"
    (d / "cgroup").write_text(line)
    env = [b"PATH=/usr/bin"]
    if env_job is not None:
        env.append(f"SLURM_JOB_ID={env_job}".encode())
    if partition is not None:
        env.append(f"SLURM_JOB_PARTITION={partition}".encode())
    (d / "environ").write_bytes(b"\0".join(env) + b"\0")
    return d
