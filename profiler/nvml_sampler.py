"""The NVML sampler: what each Slurm job does with its GPUs, measured on the GPU node.

One sampler runs on every GPU node (`lucidd-sampler`, systemd/lucidd-sampler.service). Every
`interval_s` it reads, through NVML (the `pynvml` module of NVIDIA's `nvidia-ml-py`):

* per GPU, the utilisation rates of the last sample period: SM (`gpu_util`, %) and memory
  read/write (`gmem_util`, %), from `nvmlDeviceGetUtilizationRates`;
* per GPU, the compute processes on it and the memory each holds (`nvmlDeviceGetComputeRunningProcesses`;
  `usedGpuMemory` is in bytes, or None where the driver does not say).

A process belongs to the Slurm job whose cgroup holds it (`/proc/PID/cgroup`: `.../job_1234/...`
under cgroup v1 and v2), else the job named by its `SLURM_JOB_ID` (`/proc/PID/environ`, readable by
root); the partition the run was started in is its `SLURM_JOB_PARTITION`. A GPU's utilisation
counts for a job when that job is the only one with processes on it (a profiling run has its GPUs
to itself); a GPU shared by several jobs gives them its memory figures only.

Per (job, partition of the run, node) the sampler keeps: samples, mean `gpu_util` and `gmem_util`
over its GPUs and samples, the most memory it held on one GPU (`gmem`, MiB: Lucid's packing model
reads MB of the busiest GPU) and the GPUs it used; every `flush_s` they are written to lucidd's
database (`gpu_profiles`), where lucidd reads the profiling run's figures (the rows whose partition
is the profiling partition). A job with no process on its GPUs is not seen at all.

NVML is the one part of lucidd that needs a GPU. Everything here takes the NVML module as an
argument, so tests pass a fake with the same functions and the same return shapes
(tests/profiler/fake_nvml.py), and the real module is used unchanged on a GPU node. NVML errors:
at start (no driver, no library, no permission) the sampler stops with one line; per GPU or per
query (a GPU lost, a query not supported) that GPU is skipped for the sample and the error logged
once per kind; a process that ends between NVML's answer and the /proc read is skipped.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

log = logging.getLogger("lucidd.sampler")

MIB = 1024 * 1024
_JOB_IN_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")


class SamplerError(Exception):
    """NVML cannot be used on this node at all (the sampler cannot start)."""


# ------------------------------------------------------------------------------------------------
# Which job a process belongs to


def job_of_pid(pid: int, proc_dir: str = "/proc") -> tuple[int | None, str]:
    """(Slurm job id, partition of the run) of process `pid`; (None, "") when it is not a job's.

    The cgroup is the authority on the job (a process cannot leave it; its environment it may
    rewrite); the environment gives the partition, where it can be read."""
    job = None
    try:
        with open(os.path.join(proc_dir, str(pid), "cgroup"), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = _JOB_IN_CGROUP.search(line.rstrip("\n").split(":", 2)[-1])
                if m:
                    job = int(m.group(1))
                    break
    except OSError:  # ended, or another PID namespace
        pass
    env = _environ(pid, proc_dir)
    if job is None:
        try:
            job = int(env.get("SLURM_JOB_ID", ""))
        except ValueError:
            return None, ""
    return job, env.get("SLURM_JOB_PARTITION", "")


def _environ(pid: int, proc_dir: str) -> dict:
    try:
        with open(os.path.join(proc_dir, str(pid), "environ"), "rb") as f:
            raw = f.read()
    except OSError:  # ended, or not ours to read (the sampler runs as root on a GPU node)
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (b"SLURM_JOB_ID", b"SLURM_JOB_PARTITION"):
            out[key.decode()] = value.decode("utf-8", "replace")
    return out


# ------------------------------------------------------------------------------------------------
# One reading of the node's GPUs


@dataclass
class GpuReading:
    index: int
    gpu_util: float | None  # % (None: the query failed or is not supported)
    gmem_util: float | None
    processes: dict  # pid -> bytes of GPU memory (None: the driver does not say)


def read_gpus(nvml, errors: dict | None = None) -> list[GpuReading]:
    """One reading of every GPU NVML lists. A GPU or query that fails is skipped (or its figure
    left None), counted in `errors` (kind -> count) and logged the first time it happens."""
    errors = errors if errors is not None else {}
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        _note(errors, "nvmlDeviceGetCount", exc)
        return []
    out = []
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
        except nvml.NVMLError as exc:  # e.g. GPU lost, or fallen off the bus
            _note(errors, f"GPU {i}", exc)
            continue
        util = mem_util = None
        try:
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            util, mem_util = float(rates.gpu), float(rates.memory)
        except nvml.NVMLError as exc:
            _note(errors, f"GPU {i} utilisation", exc)
        procs = {}
        try:
            for p in _compute_processes(nvml, handle):
                used = getattr(p, "usedGpuMemory", None)
                procs[int(p.pid)] = int(used) if isinstance(used, int) and used >= 0 else None
        except nvml.NVMLError as exc:
            _note(errors, f"GPU {i} processes", exc)
            continue  # without processes nothing can be given to a job
        out.append(GpuReading(i, util, mem_util, procs))
    return out


def _compute_processes(nvml, handle):
    """nvmlDeviceGetComputeRunningProcesses, which calls the _v3 entry point of drivers from 510 on;
    an older driver lacks it (NVMLError_FunctionNotFound), and the _v2 call gives the same fields."""
    try:
        return nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError as exc:
        older = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
        not_found = getattr(nvml, "NVMLError_FunctionNotFound", None)
        if older is None or not_found is None or not isinstance(exc, not_found):
            raise
        return older(handle)


def _note(errors: dict, what: str, exc) -> None:
    kind = f"{what}: {exc}"
    errors[kind] = errors.get(kind, 0) + 1
    if errors[kind] == 1:
        log.warning("NVML %s (skipped; logged once)", kind)


# ------------------------------------------------------------------------------------------------
# Per-job figures


@dataclass
class JobGpuProfile:
    """What one run of a job (job, partition, node) did with its GPUs, so far."""

    job_id: int
    partition: str
    node: str
    first_t: int
    last_t: int
    samples: int = 0  # readings in which the job had a process on a GPU
    util_samples: int = 0  # GPU readings with a utilisation figure given to this job
    gpu_util_sum: float = 0.0
    gmem_util_sum: float = 0.0
    gmem_max_mib: float | None = None
    gpus: set = field(default_factory=set)

    @property
    def gpu_util(self) -> float | None:
        return self.gpu_util_sum / self.util_samples if self.util_samples else None

    @property
    def gmem_util(self) -> float | None:
        return self.gmem_util_sum / self.util_samples if self.util_samples else None


class Sampler:
    """Reads the node's GPUs and keeps per-job figures. `nvml`: the pynvml module (or a fake)."""

    def __init__(self, nvml, node: str, proc_dir: str = "/proc"):
        self.nvml = nvml
        self.node = node
        self.proc_dir = proc_dir
        self.profiles: dict[tuple[int, str], JobGpuProfile] = {}
        self.dirty: set = set()  # keys changed since the last take_changes()
        self.errors: dict[str, int] = {}
        self.started = False

    def start(self) -> None:
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise SamplerError(f"NVML cannot start on {self.node}: {exc} (is the NVIDIA driver loaded, and "
                               "does the sampler run as root?)") from None
        self.started = True
        try:
            driver = self.nvml.nvmlSystemGetDriverVersion()
            count = self.nvml.nvmlDeviceGetCount()
            log.info("NVML on %s: driver %s, %d GPU(s)", self.node, _text(driver), count)
        except self.nvml.NVMLError as exc:
            log.warning("NVML on %s: %s", self.node, exc)

    def stop(self) -> None:
        if self.started:
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
            self.started = False

    def sample(self, now: int) -> int:
        """Take one reading at `now`; returns how many jobs had a process on a GPU."""
        readings = read_gpus(self.nvml, self.errors)
        owner_cache: dict[int, tuple[int | None, str]] = {}
        seen: set = set()
        for g in readings:
            jobs_here: dict[tuple[int, str], float | None] = {}  # job -> bytes on this GPU
            for pid, used in g.processes.items():
                if pid not in owner_cache:
                    owner_cache[pid] = job_of_pid(pid, self.proc_dir)
                job, partition = owner_cache[pid]
                if job is None:
                    continue
                key = (job, partition)
                prev = jobs_here.get(key)
                jobs_here[key] = used if prev is None else prev + (used or 0)
            for key, used in jobs_here.items():
                prof = self.profiles.get(key)
                if prof is None:
                    prof = self.profiles[key] = JobGpuProfile(key[0], key[1], self.node, now, now)
                prof.last_t = now
                prof.gpus.add(g.index)
                if used is not None:
                    mib = used / MIB
                    prof.gmem_max_mib = mib if prof.gmem_max_mib is None else max(prof.gmem_max_mib, mib)
                if len(jobs_here) == 1 and g.gpu_util is not None and g.gmem_util is not None:
                    prof.util_samples += 1
                    prof.gpu_util_sum += g.gpu_util
                    prof.gmem_util_sum += g.gmem_util
                seen.add(key)
                self.dirty.add(key)
        for key in seen:
            self.profiles[key].samples += 1
        return len({k[0] for k in seen})

    def take_changes(self) -> list[JobGpuProfile]:
        """The profiles changed since the last call (to write), oldest first."""
        out = sorted((self.profiles[k] for k in self.dirty), key=lambda p: (p.first_t, p.job_id))
        self.dirty = set()
        return out

    def forget_before(self, t: int) -> None:
        """Drop the figures of runs not seen since `t`: they ended. Call it after take_changes(),
        whose list (to be written) keeps its own references."""
        for key in [k for k, p in self.profiles.items() if p.last_t < t and k not in self.dirty]:
            del self.profiles[key]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def load_nvml():
    """The real NVML module (`pynvml`, from nvidia-ml-py); SamplerError when it is not installed."""
    try:
        import pynvml
    except ImportError:
        raise SamplerError("the pynvml module is not installed: pip install 'lucidd[gpu]' (nvidia-ml-py) "
                           "on the GPU nodes") from None
    return pynvml
