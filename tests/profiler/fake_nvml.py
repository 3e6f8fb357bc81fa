"""A stand-in for the `pynvml` module (nvidia-ml-py) on machines without a GPU.

Same function names, arguments, return shapes and error classes as the real module (nvidia-ml-py
13.x), for the calls profiler/nvml_sampler.py makes (tests/profiler/test_nvml_sampler.py checks the
names against the real module when it is installed): utilisation rates as an object with `.gpu` and
`.memory` (%), processes as objects with `.pid`, `.usedGpuMemory` (bytes, or None where the driver
does not say), `.gpuInstanceId` and `.computeInstanceId` (0xFFFFFFFF outside MIG), the MIG mode as
[current, pending], the driver version as bytes. As in the real module, each NVML_ERROR_* is an
NVMLError subclass, and the unversioned nvmlDeviceGetComputeRunningProcesses (`@throwOnVersionMismatch`)
turns the FunctionNotFound of a driver without the _v3 query into NVMLLibraryMismatchError, which is
not an NVMLError. A GPU in MIG mode answers nvmlDeviceGetUtilizationRates with NotSupported, as the
real driver does. A test sets `gpus` and `fail` and reads `calls`.
"""

from __future__ import annotations

from types import SimpleNamespace

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
_NO_INSTANCE = 0xFFFFFFFF


class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    def __init__(self, value=999):
        self.value = value
        super().__init__(value)

    def __str__(self):
        return _TEXT.get(self.value, f"Unknown Error ({self.value})")


def _error_class(name, value):
    return type(name, (NVMLError,), {"__init__": lambda self: NVMLError.__init__(self, value)})


# pynvml's names and codes (NVML_ERROR_*)
NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", 1)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", 3)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", 4)
NVMLError_InsufficientSize = _error_class("NVMLError_InsufficientSize", 7)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9)
NVMLError_Timeout = _error_class("NVMLError_Timeout", 10)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", 12)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", 13)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", 15)
NVMLError_Unknown = _error_class("NVMLError_Unknown", 999)

_TEXT = {1: "Uninitialized", 3: "Not Supported", 4: "Insufficient Permissions", 7: "Insufficient Size",
         9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found", 13: "Function Not Found",
         15: "GPU is lost", 999: "Unknown Error"}


class FakeNvml:
    """`gpus`: one dict per GPU: {"util": %, "mem_util": %, "procs": {pid: bytes or None}}, and
    optionally "mig": True (MIG mode on), False (off: the default), None (a GPU without MIG:
    nvmlDeviceGetMigMode answers NotSupported), "total_mib" (its memory, 24,576 by default) and
    "name" ("FakeGPU").
    `fail`: call name (optionally "name:index") -> exception class to raise.
    `old_driver`: a driver before 510, without the _v3 process query."""

    NVMLError = NVMLError
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(self, gpus=None, fail=None, old_driver=False):
        self.gpus = gpus or []
        self.fail = dict(fail or {})
        self.old_driver = old_driver
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

    def nvmlDeviceGetMigMode(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetMigMode", handle.index)
        mig = self.gpus[handle.index].get("mig", False)
        if mig is None:
            raise NVMLError_NotSupported()
        mode = NVML_DEVICE_MIG_ENABLE if mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetUtilizationRates", handle.index)
        g = self.gpus[handle.index]
        if g.get("mig"):
            raise NVMLError_NotSupported()  # "On MIG-enabled GPUs, querying device utilization rates is not supported"
        return SimpleNamespace(gpu=g["util"], memory=g["mem_util"])

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802 - bytes, as the real module's c_nvmlMemory_t
        self._maybe_fail("nvmlDeviceGetMemoryInfo", handle.index)
        total = int(self.gpus[handle.index].get("total_mib", 24576)) * 1024 * 1024
        used = sum(b or 0 for b in self.gpus[handle.index]["procs"].values())
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetName(self, handle):  # noqa: N802 - str in nvidia-ml-py 13 (bytes in old pynvml)
        self._maybe_fail("nvmlDeviceGetName", handle.index)
        return self.gpus[handle.index].get("name", "FakeGPU")

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetComputeRunningProcesses_v3", handle.index)
        if self.old_driver:
            raise NVMLError_FunctionNotFound()
        return self._procs(handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetComputeRunningProcesses_v2", handle.index)
        return self._procs(handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        self._maybe_fail("nvmlDeviceGetComputeRunningProcesses", handle.index)
        try:  # @throwOnVersionMismatch around the _v3 call
            return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)
        except NVMLError_FunctionNotFound:
            raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match "
                                           "the NVML lib version.") from None

    def _procs(self, handle):
        g = self.gpus[handle.index]
        instance = 1 if g.get("mig") else _NO_INSTANCE
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=instance, computeInstanceId=instance)
                for pid, used in g["procs"].items()]


def fake_proc(root, pid, job=None, partition=None, cgroup_v2=True, env_job=None, cgroup=None):
    """A /proc/PID with the cgroup line slurmd's cgroup plugin gives a task (or `cgroup`, the whole
    file), and an environ."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    if cgroup is not None:
        line = cgroup
    elif job is not None:
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
