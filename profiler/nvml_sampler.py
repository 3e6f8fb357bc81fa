"""The NVML sampler: what each Slurm job does with its GPUs, measured on the GPU node.

One sampler runs on every GPU node (`lucidd-sampler`, systemd/lucidd-sampler.service). Every
`interval_s` it reads, through NVML (the `pynvml` module of NVIDIA's `nvidia-ml-py`):

* per GPU, the utilisation rates of the driver's last sample period (1/6 s to 1 s, depending on
  the product; not the whole `interval_s`): `gpu_util`, the % of that time during which one or
  more kernels ran (NVML's `utilization.gpu`: not SM occupancy), and `gmem_util`, the % of it
  during which device memory was read or written; from `nvmlDeviceGetUtilizationRates`. A GPU in
  MIG mode has no such figure (NVML: not supported on MIG-enabled GPUs): it is not asked for;
* per GPU, the compute processes on it and the memory each holds
  (`nvmlDeviceGetComputeRunningProcesses_v3`, else `_v2`; `usedGpuMemory` is in bytes, or None
  where the driver does not say). NVML gives host PIDs (the driver ignores PID namespaces), so the
  sampler must run in the host's PID namespace to find them in /proc.

A process belongs to the Slurm job whose cgroup holds it (`/proc/PID/cgroup`: `.../job_1234/...`
under cgroup v1 and v2), else the job named by its `SLURM_JOB_ID` (`/proc/PID/environ`, readable by
root); the partition the run was started in is its `SLURM_JOB_PARTITION` (when that environment is
the same job's). A GPU's utilisation counts for a job when that job is the only one with processes
on it (a profiling run has its GPUs to itself); a GPU shared by several jobs gives them its memory
figures only.

Per (job, partition of the run, node) the sampler keeps: samples, mean `gpu_util` and `gmem_util`
over its GPUs and samples, the most memory it held on one GPU (`gmem`, MiB: Lucid's packing model
reads MB of the busiest GPU) and the GPUs it used (NVML's indices, as nvidia-smi numbers them);
every `flush_s` they are written to lucidd's database (`gpu_profiles`), where lucidd reads the
profiling run's figures (the rows whose partition is the profiling partition). A job with no
process on its GPUs is not seen at all.

NVML is the one part of lucidd that needs a GPU. Everything here takes the NVML module as an
argument, so tests pass a fake with the same functions and the same return shapes
(tests/profiler/fake_nvml.py), and the real module is used unchanged on a GPU node. NVML errors:
at start (no driver, no library, no permission, or an nvidia-ml-py whose process records do not
match the driver's) the sampler stops with one line; per GPU or per query (a GPU lost, a query not
supported) that GPU is skipped for the sample and the error logged once per kind, and a lost GPU
is left alone for LOST_RETRY_READINGS readings before it is tried again; a process that ends
between NVML's answer and the /proc read is skipped.
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
    except OSError:  # ended, not ours to read, or another PID namespace
        pass
    env = _environ(pid, proc_dir)
    try:
        env_job = int(env.get("SLURM_JOB_ID", ""))
    except ValueError:
        env_job = None
    if job is None:
        if env_job is None:
            return None, ""
        job = env_job
    elif env_job is not None and env_job != job:
        # an environment inherited from another job (e.g. `srun --jobid` from inside one): its
        # partition is that job's, not this run's
        return job, ""
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
    gpu_util: float | None  # % (None: the query failed, is not supported, or the GPU is in MIG mode)
    gmem_util: float | None
    processes: dict  # pid -> bytes of GPU memory (None: the driver does not say)
    mig: bool = False  # MIG mode: processes of all its instances, no utilisation


# A GPU that NVML reports lost (fallen off the bus) is not asked again for this many readings: each
# call on it may wait for the driver's timeout, and it needs a reset or a reboot to come back.
LOST_RETRY_READINGS = 60


def nvml_errors(nvml) -> tuple:
    """What an NVML query can raise: NVMLError (each NVML_ERROR_* is a subclass) and, from the
    unversioned wrappers of recent nvidia-ml-py (`@throwOnVersionMismatch`), NVMLLibraryMismatchError,
    which is *not* an NVMLError: it replaces NVMLError_FunctionNotFound."""
    out = [nvml.NVMLError]
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and issubclass(mismatch, Exception):
        out.append(mismatch)
    return tuple(out)


def read_gpus(nvml, errors: dict | None = None, lost: dict | None = None) -> list[GpuReading]:
    """One reading of every GPU NVML lists. A GPU or query that fails is skipped (or its figure
    left None), counted in `errors` (kind -> count) and logged the first time it happens. `lost`
    (GPU index -> readings still to skip) keeps a lost GPU out of the next readings."""
    errors = errors if errors is not None else {}
    lost = lost if lost is not None else {}
    errs = nvml_errors(nvml)
    try:
        count = nvml.nvmlDeviceGetCount()
    except errs as exc:
        _note(errors, "nvmlDeviceGetCount", exc)
        return []
    out = []
    for i in range(count):
        if lost.get(i, 0) > 0:
            lost[i] -= 1
            continue
        try:
            reading = _read_gpu(nvml, i, errors, errs)
        except errs as exc:  # the GPU cannot be read at all: lost, fallen off the bus, no permission
            _note(errors, f"GPU {i}", exc)
            if _is_lost(nvml, exc):
                lost[i] = LOST_RETRY_READINGS
            continue
        lost.pop(i, None)
        if reading is not None:
            out.append(reading)
    return out


def _read_gpu(nvml, i: int, errors: dict, errs: tuple) -> GpuReading | None:
    """GPU i's reading; None when its processes cannot be read. Raises what makes the whole GPU
    unreadable (no handle; lost)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(i)
    mig = _mig_enabled(nvml, handle, errs)
    util = mem_util = None
    if mig:
        _note(errors, f"GPU {i}", "in MIG mode: no utilisation figures (NVML has none), memory per process only",
              level=logging.INFO)
    else:
        try:
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            util, mem_util = float(rates.gpu), float(rates.memory)
        except errs as exc:
            if _is_lost(nvml, exc):
                raise
            _note(errors, f"GPU {i} utilisation", exc)
    procs = {}
    try:
        for p in _compute_processes(nvml, handle):
            used = getattr(p, "usedGpuMemory", None)
            procs[int(p.pid)] = int(used) if isinstance(used, int) and used >= 0 else None
    except errs as exc:
        if _is_lost(nvml, exc):
            raise
        _note(errors, f"GPU {i} processes", exc)
        return None  # without processes nothing can be given to a job
    return GpuReading(i, util, mem_util, procs, mig)


def _is_lost(nvml, exc) -> bool:
    lost = getattr(nvml, "NVMLError_GpuIsLost", None)
    return isinstance(lost, type) and isinstance(exc, lost)


def _mig_enabled(nvml, handle, errs: tuple) -> bool:
    """Whether the GPU is in MIG mode now (nvmlDeviceGetMigMode: [current, pending]). A GPU that
    cannot be in MIG mode answers NotSupported, a driver older than MIG FunctionNotFound: not MIG."""
    get = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if get is None:
        return False
    try:
        current = get(handle)[0]
    except errs as exc:
        if _is_lost(nvml, exc):
            raise
        return False
    return current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


_PROCESS_QUERIES = ("nvmlDeviceGetComputeRunningProcesses_v3",  # drivers from 510 on
                    "nvmlDeviceGetComputeRunningProcesses_v2",  # older drivers (absent in nvidia-ml-py 12.535.x)
                    "nvmlDeviceGetComputeRunningProcesses")


def _compute_processes(nvml, handle):
    """The GPU's compute processes, from the newest process query both nvidia-ml-py and the driver
    have. The versioned calls are used by name: the unversioned one of recent nvidia-ml-py calls
    _v3 and turns the FunctionNotFound of an older driver into NVMLLibraryMismatchError."""
    missing = tuple(c for c in (getattr(nvml, "NVMLError_FunctionNotFound", None),
                                getattr(nvml, "NVMLLibraryMismatchError", None)) if isinstance(c, type))
    last = None
    for name in _PROCESS_QUERIES:
        query = getattr(nvml, name, None)
        if query is None:
            continue
        try:
            return query(handle)
        except missing as exc:
            last = exc
    if last is None:
        raise nvml.NVMLError(13)  # no process query at all (NVML_ERROR_FUNCTION_NOT_FOUND)
    raise last


def process_record_problem(nvml) -> str | None:
    """Why this nvidia-ml-py cannot read the driver's process records, or None. nvidia-ml-py
    12.535.77 reads them as 32-byte records (with usedGpuCcProtectedMemory); the drivers from
    535.98 on write 24-byte ones (nvmlProcessInfo_v2_t layout) for the _v3 query, so from the second
    process on every pid and memory figure it returns is garbage."""
    struct = getattr(nvml, "c_nvmlProcessInfo_v3_t", None) or getattr(nvml, "c_nvmlProcessInfo_t", None)
    fields = [f[0] for f in getattr(struct, "_fields_", ())]
    if "usedGpuCcProtectedMemory" in fields:
        return ("this nvidia-ml-py reads process records with a layout the driver does not write "
                "(nvidia-ml-py 12.535.77): install nvidia-ml-py 12.535.108 or later")
    return None


def _note(errors: dict, what: str, exc, level: int = logging.WARNING) -> None:
    kind = f"{what}: {exc}"
    errors[kind] = errors.get(kind, 0) + 1
    if errors[kind] == 1:
        log.log(level, "NVML %s (%s)", kind, "skipped; logged once" if level >= logging.WARNING else "logged once")


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
    # a reading in which NVML could not tell one of its processes' memory: the most it held is then
    # unknown for the run (the known part alone under-counts it, and packing would trust that figure)
    gmem_unknown: bool = False
    gpus: set = field(default_factory=set)

    @property
    def gmem_mib(self) -> float | None:
        """The most memory the run held on one GPU, None when NVML could not always tell."""
        return None if self.gmem_unknown else self.gmem_max_mib

    @property
    def gpu_util(self) -> float | None:
        return self.gpu_util_sum / self.util_samples if self.util_samples else None

    @property
    def gmem_util(self) -> float | None:
        return self.gmem_util_sum / self.util_samples if self.util_samples else None


@dataclass
class NodeGpus:
    """A node's GPUs as NVML lists them: what its sampler's heartbeat says (store.GpuNodeRow)."""
    count: int | None = None  # None: NVML could not count them
    gpu_memory_mib: float | None = None  # the smallest GPU's memory; None: a GPU's could not be read
    name: str = ""  # the first GPU's model ("NVIDIA H200"); differing models are joined with " + "
    driver: str = ""
    problem: str = ""  # why a figure is missing


def describe_gpus(nvml, known: dict | None = None, skip=()) -> NodeGpus:
    """The node's GPU count, smallest memory, models and driver. A GPU whose memory cannot be read
    leaves the smallest unknown (None) rather than ignored: GPU packing must not take a larger GPU's
    memory for a smaller one's. `known` (GPU index -> (MiB, model)), kept by the caller between
    calls, gives a GPU read once and unreadable now (lost) the figures it had; `skip`: GPUs not to
    ask now (lost: each call on one can wait for the driver's timeout)."""
    errs = nvml_errors(nvml)
    known = known if known is not None else {}
    out = NodeGpus()
    try:
        out.driver = _text(nvml.nvmlSystemGetDriverVersion())
        out.count = int(nvml.nvmlDeviceGetCount())
    except errs as exc:
        out.problem = f"cannot count the GPUs: {exc}"
        return out
    sizes, names = [], []
    for i in range(out.count):
        if i not in skip:
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                known[i] = (nvml.nvmlDeviceGetMemoryInfo(h).total / MIB, _text(nvml.nvmlDeviceGetName(h)))
            except errs as exc:
                out.problem = f"GPU {i}: cannot read its memory or model: {exc}"
        elif i not in known:
            out.problem = f"GPU {i}: cannot read its memory or model: left alone (lost)"
        if i not in known:
            sizes = None
            break
        mib, name = known[i]
        sizes.append(mib)
        if name not in names:
            names.append(name)
    if sizes:
        out.gpu_memory_mib = round(min(sizes), 1)
    out.name = " + ".join(names)
    return out


class Sampler:
    """Reads the node's GPUs and keeps per-job figures. `nvml`: the pynvml module (or a fake)."""

    def __init__(self, nvml, node: str, proc_dir: str = "/proc"):
        self.nvml = nvml
        self.node = node
        self.proc_dir = proc_dir
        self.profiles: dict[tuple[int, str], JobGpuProfile] = {}
        self.dirty: set = set()  # keys changed since the last take_changes()
        self.errors: dict[str, int] = {}
        self.lost: dict[int, int] = {}  # lost GPU -> readings it is still left out of
        self.started = False
        self.gpus = NodeGpus()  # what the node's GPUs are, read at start() and at each heartbeat
        self.gpu_figures: dict[int, tuple] = {}  # GPU index -> (MiB, model), as last read

    def start(self) -> None:
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise SamplerError(f"NVML cannot start on {self.node}: {exc} (is the NVIDIA driver loaded, and "
                               "does the sampler run as root?)") from None
        self.started = True
        problem = process_record_problem(self.nvml)
        if problem:
            self.stop()
            raise SamplerError(f"NVML cannot be used on {self.node}: {problem}")
        self.gpus = describe_gpus(self.nvml, self.gpu_figures)
        if self.gpus.count is not None:
            log.info("NVML on %s: driver %s, %d GPU(s)%s", self.node, self.gpus.driver or "?", self.gpus.count,
                     f", the smallest {self.gpus.gpu_memory_mib:,.0f} MiB" if self.gpus.gpu_memory_mib else "")
        if self.gpus.problem:
            log.warning("NVML on %s: %s", self.node, self.gpus.problem)
        if not in_host_pid_namespace(self.proc_dir):
            log.warning("lucidd-sampler runs in a PID namespace of its own: NVML gives host PIDs, which name other "
                        "processes (or none) in %s, so jobs are not found or are mistaken; run it on the host "
                        "(or with the host's PID namespace)", self.proc_dir)

    def describe(self) -> NodeGpus:
        """The node's GPUs read again (a GPU lost at start and reset since, a driver that could not
        count them): a lost GPU is not asked, and keeps the figures it was last read with."""
        before = self.gpus
        self.gpus = describe_gpus(self.nvml, self.gpu_figures, skip={i for i, n in self.lost.items() if n > 0})
        if self.gpus.problem and self.gpus.problem != before.problem:
            log.warning("NVML on %s: %s", self.node, self.gpus.problem)
        return self.gpus

    def stop(self) -> None:
        if self.started:
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
            self.started = False

    def sample(self, now: int) -> int:
        """Take one reading at `now`; returns how many jobs had a process on a GPU."""
        readings = read_gpus(self.nvml, self.errors, self.lost)
        owner_cache: dict[int, tuple[int | None, str]] = {}
        for g in readings:
            for pid in g.processes:
                if pid not in owner_cache:
                    owner_cache[pid] = job_of_pid(pid, self.proc_dir)
        run_of = self._runs(owner_cache)
        seen: set = set()
        for g in readings:
            # by job, not by process: a job's processes on one GPU are one user of it (a helper whose
            # environment was cleared, `apptainer --cleanenv`, has no SLURM_JOB_PARTITION; keyed apart,
            # the job looked like two sharing the GPU, and its memory was split between two rows)
            jobs_here: dict[tuple[int, str], list] = {}  # run -> [bytes on this GPU, some unknown]
            for pid, used in g.processes.items():
                job = owner_cache[pid][0]
                if job is None:
                    continue
                held = jobs_here.setdefault(run_of[job], [0, False])
                if used is None:
                    held[1] = True
                else:
                    held[0] += used
            for key, (used, unknown) in jobs_here.items():
                prof = self.profiles.get(key)
                if prof is None:
                    prof = self.profiles[key] = JobGpuProfile(key[0], key[1], self.node, now, now)
                prof.last_t = now
                prof.gpus.add(g.index)
                if unknown:
                    prof.gmem_unknown = True
                else:
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

    def _runs(self, owners: dict) -> dict:
        """job id -> the run (job, partition) its processes in this reading belong to: the partition
        any of them names (SLURM_JOB_PARTITION), else the one of the job's run seen last on this node
        (a reading in which only a helper without it held a GPU), else ""."""
        named: dict[int, set] = {}
        for job, partition in owners.values():
            if job is not None:
                named.setdefault(job, set()).update([partition] if partition else [])
        out = {}
        for job, parts in named.items():
            if parts:
                out[job] = (job, min(parts))  # several: an inherited environment; one, stable, choice
                continue
            known = [p for p in self.profiles.values() if p.job_id == job and p.partition]
            out[job] = (job, max(known, key=lambda p: p.last_t).partition if known else "")
        return out

    def take_changes(self) -> list[JobGpuProfile]:
        """The profiles changed since the last call (to write), oldest first."""
        out = sorted((self.profiles[k] for k in self.dirty), key=lambda p: (p.first_t, p.job_id))
        self.dirty = set()
        return out

    def forget_before(self, t: int, keep=()) -> None:
        """Drop the figures of runs not seen since `t`: they ended. Call it after take_changes(),
        whose list (to be written) keeps its own references; `keep`: keys of runs not yet written
        (a failed write), kept so that a run seen again adds to the same figures."""
        keep = set(keep)
        for key in [k for k, p in self.profiles.items() if p.last_t < t and k not in self.dirty and k not in keep]:
            del self.profiles[key]


# the inode of the initial PID namespace (PROC_PID_INIT_INO, include/linux/proc_ns.h)
_HOST_PID_NS = "pid:[4026531836]"


def in_host_pid_namespace(proc_dir: str = "/proc") -> bool:
    """False when this process is in a PID namespace other than the host's (a container without
    the host's PIDs); True when it is, or when that cannot be read."""
    try:
        return os.readlink(os.path.join(proc_dir, "self", "ns", "pid")) == _HOST_PID_NS
    except OSError:
        return True


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
