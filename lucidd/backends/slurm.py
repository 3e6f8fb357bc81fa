"""The Slurm backend: reads with `squeue --json`, `sinfo --json`, `sacct --json` (one call each
per cycle, never one per job) and acts with `scontrol`.

Every subprocess call goes through `SlurmRunner.run`: an argument list (never a shell), a
timeout, a parsed error and a counter. Slurm is found through the usual `SLURM_CONF` and PATH
(or `[slurm] bin_dir`). What Slurm 22.05 does with each command, and the traps (a same-second
restart after a requeue kills the job; `priority=` pins a job) are in docs/deploy.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections import Counter

from .base import WARNING_SIGNALS, Backend, BackendError, ClusterSnapshot, LiveJob, NodeGPUs, Partition

log = logging.getLogger("lucidd.slurm")

# SiteFactor values slurmctld accepts (22.05): +/- 2147483645. Priority is floored at 1, so lucidd
# uses values >= 2 (docs/deploy.md).
SITE_FACTOR_MIN = 2
SITE_FACTOR_MAX = 2147483645

# Messages that mean the job is gone or cannot take the change: retrying will not help.
_PERMANENT = ("invalid job id", "job has already finished", "already completing or completed",
              "presently disabled", "invalid partition", "access/permission denied", "not supported",
              "requested operation not supported", "job is no longer pending")
# Messages that mean slurmctld (or slurmdbd) is not answering now: retry next cycle.
_TRANSIENT = ("unable to contact slurm controller", "connection refused", "socket timed out",
              "slurm_receive_msg", "connect failure", "zero bytes were transmitted", "resource temporarily",
              "slurmdbd", "unable to connect", "communication connection failure", "slurm backup controller")


class SlurmCommandError(BackendError):
    """A Slurm command failed. Carries the command, exit code and Slurm's own message."""

    def __init__(self, argv, rc, message, transient):
        self.argv = list(argv)
        self.rc = rc
        self.slurm_message = message
        super().__init__(f"{' '.join(self.argv[:3])}{' ...' if len(self.argv) > 3 else ''}: "
                         f"{message or f'exit {rc}'}", transient=transient)


def classify(message: str) -> bool:
    """True when a Slurm error message looks transient (the controller is not answering)."""
    m = (message or "").lower()
    if any(p in m for p in _PERMANENT):
        return False
    return any(p in m for p in _TRANSIENT) or not m


class SlurmRunner:
    """The one place lucidd runs Slurm commands."""

    def __init__(self, bin_dir: str | None = None, timeout_s: float = 30.0, env: dict | None = None):
        self.bin_dir = bin_dir or None
        self.timeout_s = float(timeout_s)
        self.env = env
        self.calls = Counter()  # command -> calls made
        self.failures = Counter()
        self.seconds = 0.0
        # called with the argv before each command (the daemon feeds systemd's watchdog there: a
        # cycle of slow but bounded Slurm reads is not a hang); its errors never stop the command
        self.before_call = None

    def executable(self, command: str) -> str:
        if self.bin_dir:
            path = os.path.join(self.bin_dir, command)
            if os.access(path, os.X_OK):
                return path
            raise BackendError(f"{command} not found in [slurm] bin_dir {self.bin_dir}", transient=False)
        path = shutil.which(command)
        if path is None:
            raise BackendError(f"{command} not found on PATH (install Slurm's client commands or set "
                               f"[slurm] bin_dir)", transient=False)
        return path

    def run(self, argv: list[str], timeout_s: float | None = None, env: dict | None = None) -> str:
        """Run one Slurm command; return its stdout. Raises SlurmCommandError on failure. `env`: more
        environment for this call (e.g. SLURM_TIME_FORMAT)."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        command = argv[0]
        full = [self.executable(command), *argv[1:]]
        if self.before_call is not None:
            try:
                self.before_call(argv)
            except Exception:  # noqa: BLE001 - a hook's failure is not the command's
                log.debug("before_call hook failed", exc_info=True)
        self.calls[command] += 1
        t0 = time.perf_counter()
        try:
            call_env = self.env if not env else {**(self.env if self.env is not None else os.environ), **env}
            proc = subprocess.run(full, capture_output=True, text=True, errors="replace",
                                  timeout=timeout_s or self.timeout_s, env=call_env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.failures[command] += 1
            raise SlurmCommandError(argv, None, f"timed out after {timeout_s or self.timeout_s:g} s", True) from None
        except OSError as exc:
            self.failures[command] += 1
            raise SlurmCommandError(argv, None, str(exc), True) from None
        finally:
            self.seconds += time.perf_counter() - t0
        if proc.returncode != 0:
            self.failures[command] += 1
            msg = " ".join((proc.stderr or proc.stdout or "").split())[:500]
            raise SlurmCommandError(argv, proc.returncode, msg, classify(msg))
        return proc.stdout

    def run_json(self, argv: list[str], object_hook=None) -> dict:
        """A command's JSON reply, parsed (`object_hook`: json's, to shrink objects as they are read)."""
        out = self.run(argv)
        try:
            data = json.loads(out, object_hook=object_hook)
        except ValueError as exc:
            raise SlurmCommandError(argv, 0, f"malformed JSON reply ({exc}; {len(out)} bytes)", True) from None
        if not isinstance(data, dict):
            raise SlurmCommandError(argv, 0, "malformed JSON reply (not an object)", True)
        errors = [e for e in (data.get("errors") or []) if not _empty_result(e)]
        if errors:
            # Slurm 22.05's `squeue --json` exits 0 when slurmctld does not answer, with an error
            # entry and no jobs (tests/live/data/squeue_no_controller.json): read as a reply, that
            # is an empty cluster, and every job lucidd knows would be taken as gone.
            what = "; ".join(_error_text(e) for e in errors[:3])
            raise SlurmCommandError(argv, 0, f"Slurm reported an error in its JSON reply: {what}", True)
        return data


def _empty_result(err) -> bool:
    """sacct's "Nothing found" (a query with no match) is an answer, not a failure."""
    return isinstance(err, dict) and "nothing found" in f"{err.get('description', '')} {err.get('error', '')}".lower()


def _error_text(err) -> str:
    if not isinstance(err, dict):
        return str(err)[:200]
    parts = [str(err.get(k)) for k in ("description", "error", "source") if err.get(k) not in (None, "")]
    return " / ".join(parts)[:200] or "unspecified"


# ----- parsing ----------------------------------------------------------------------------------

_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")


def json_int(v, default=None):
    """An integer from a Slurm JSON value: 22.05's plain numbers or newer Slurm's {set, infinite,
    number}; `default` when unset, None when infinite."""
    if v is None or isinstance(v, bool):
        return default
    if isinstance(v, dict):  # newer Slurm: {"set": true, "infinite": false, "number": N}
        if v.get("infinite"):
            return None
        if v.get("set") is False:
            return default
        v = v.get("number")
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity in a damaged file
        return default


def json_time(v):
    """A Unix time from a Slurm JSON value; None when unset (Slurm writes 0)."""
    t = json_int(v, None)
    return t if t else None  # 0 = not set


def _gres_items(spec: str):
    """The items of a GRES/TRES spec, their (IDX:0-1,3) / (S:0-1) parts dropped (they hold commas),
    newer Slurm's `gres/gpu:2` spelling written as `gres:gpu:2`."""
    for item in re.sub(r"\([^)]*\)", "", spec or "").split(","):
        item = item.strip()
        if item.startswith("gres/") and "=" not in item:
            item = "gres:" + item[len("gres/"):]
        if item:
            yield item


def _gres_count(item: str, name: str) -> int:
    """The count of one `[gres:]NAME[:TYPE][:N]` item when it names `name` (no N: 1), else 0."""
    parts = item.split(":")
    if parts[0] == "gres":
        parts = parts[1:]
    if not parts or parts[0] != name:
        return 0
    return int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1


def gres_gpu_count(spec: str) -> int:
    """GPUs in a GRES/TRES spec like 'gres:gpu:2', 'gpu:a100:4(S:0-1)', 'gpu:g0:1,gpu:g1:1'."""
    total = 0
    for item in _gres_items(spec):
        if item.startswith("gres/gpu"):  # TRES form gres/gpu=N or gres/gpu:type=N
            m = re.match(r"gres/gpu(?::[^=]+)?=(\d+)", item)
            total += int(m.group(1)) if m and ":" not in item.split("=")[0] else 0
        else:
            total += _gres_count(item, "gpu")
    return total


def gres_shard_count(spec: str) -> int:
    """Shards in a job's GRES spec ('gres:shard:2', 'shard:g4:1'); 0 when it asks for none."""
    return sum(_gres_count(item, "shard") for item in _gres_items(spec))


_GRES_USED_ITEM = re.compile(r"(gpu|shard)(?::[^,(]*)?\(IDX:([^)]*)\)")


def gres_used_gpus(spec: str) -> int:
    """GPUs of a node in use, from sinfo's `gres_used`: the GPU indices that whole-GPU jobs hold
    and those that shard jobs hold, counted once. slurmctld miscounts a node's used shards (two jobs
    on one GPU's shards show as 1), but its index lists are right (the test cluster, and
    ../shared/notes/slurm-live-mechanisms.md D.2); without index lists, the gpu counts."""
    if not spec:
        return 0
    held, any_idx = set(), False
    for kind, idx in _GRES_USED_ITEM.findall(spec):
        any_idx = True
        for part in idx.split(","):
            a, _, b = part.strip().partition("-")
            if a.isdigit():
                held.update(range(int(a), int(b) + 1 if b.isdigit() else int(a) + 1))
    return len(held) if any_idx else gres_gpu_count(spec)


def job_gpus(rec: dict) -> int:
    """Total GPUs a job asks for, from slurmctld's own TRES summary when present. A job of shards
    counts one GPU per node: Slurm 22.05 places one job's shards on one GPU of a node (a request
    for more shards than a GPU has never starts)."""
    m = _TRES_GPU.search(rec.get("tres_req_str") or "")
    if m:
        return int(m.group(1))
    per_job = gres_gpu_count(rec.get("tres_per_job") or "")
    if per_job:
        return per_job
    nodes = max(1, json_int(rec.get("node_count"), 1) or 1)
    per_node = gres_gpu_count(rec.get("tres_per_node") or "")
    if not per_node and gres_shard_count(rec.get("tres_per_node") or ""):
        per_node = 1
    return per_node * nodes


def job_node_names(rec: dict) -> tuple:
    """The nodes a job was given (squeue --json's job_resources; empty while pending)."""
    res = rec.get("job_resources") or {}
    names = [n.get("nodename") for n in (res.get("allocated_nodes") or []) if isinstance(n, dict)]
    names = [n for n in names if n]
    if names:
        return tuple(names)
    nodes = rec.get("nodes") or ""
    # a single plain name only: a compressed list (gpu[1-3]) is a multi-node job, never profiled
    return (nodes,) if nodes and not any(c in nodes for c in "[],") else ()


def parse_job(rec: dict) -> LiveJob:
    state = rec.get("job_state") or ""
    if isinstance(state, list):  # newer Slurm returns a list of flags
        state = state[0] if state else ""
    limit = rec.get("time_limit")
    limit_min = json_int(limit, None)
    array_str = rec.get("array_task_string") or ""
    return LiveJob(
        job_id=int(rec["job_id"]),
        name=rec.get("name") or "",
        user=rec.get("user_name") or str(rec.get("user_id", "")),
        account=rec.get("account") or "",
        qos=rec.get("qos") or "",
        partition=rec.get("partition") or "",
        state=str(state).upper(),
        reason=rec.get("state_reason") or "",
        gpus=job_gpus(rec),
        nodes=max(1, json_int(rec.get("node_count"), 1) or 1),
        cpus=json_int(rec.get("cpus"), 0) or 0,
        submit_time=json_time(rec.get("submit_time")) or 0,
        start_time=json_time(rec.get("start_time")),
        end_time=json_time(rec.get("end_time")),
        time_limit_s=None if limit_min is None else limit_min * 60,
        restart_count=json_int(rec.get("restart_cnt"), 0) or 0,
        requeue=bool(rec.get("requeue", True)),
        comment=rec.get("comment") or "",
        admin_comment=rec.get("admin_comment") or "",
        array_pending=bool(array_str),  # only a not yet split array record has a task string ('1-9', '1,3,5')
        array_job_id=json_int(rec.get("array_job_id"), 0) or 0,
        priority=json_int(rec.get("priority"), 1),
        nice=json_int(rec.get("nice"), 0) or 0,  # (null when unset)
        dependency=rec.get("dependency") or "",
        reservation=str(rec.get("resv_name") or ""),
        required_nodes=rec.get("required_nodes") or "",
        excluded_nodes=rec.get("excluded_nodes") or "",
        node_names=job_node_names(rec),
        # 22.05's words for --exclusive, --exclusive=user and --exclusive=mcs (seen on the test cluster):
        # each keeps others off the nodes it gets
        exclusive=str(rec.get("shared") or "").lower() in ("none", "user", "mcs"),
        het_job_id=json_int(rec.get("het_job_id"), 0) or 0,
        het_job_offset=json_int(rec.get("het_job_offset"), 0) or 0,
        batch=bool(rec.get("batch_flag", True)),
        deadline=json_time(rec.get("deadline")) or None,  # 0: none
        begin_time=json_time(rec.get("eligible_time")) or None,
        shards=gres_shard_count(rec.get("tres_per_node") or ""),
    )


def parse_squeue(data: dict) -> list[LiveJob]:
    jobs = []
    for rec in data.get("jobs") or []:
        try:
            if not isinstance(rec, dict):
                raise TypeError(f"a {type(rec).__name__}, not a job object")
            jobs.append(parse_job(rec))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # one odd record never stops the cycle
            log.warning("squeue: skipped a job record lucidd cannot read (%s): %.200r", exc, rec)
    return jobs


def parse_sinfo(data: dict) -> dict:
    nodes = {}
    for rec in data.get("nodes") or []:
        name = rec.get("name")
        if not name:
            continue
        state = rec.get("state") or ""
        flags = rec.get("state_flags") or []
        if isinstance(state, list):
            state = "+".join(state)
        nodes[name] = NodeGPUs(name, gres_gpu_count(rec.get("gres") or ""), gres_used_gpus(rec.get("gres_used") or ""),
                               "+".join([str(state), *map(str, flags)]), tuple(rec.get("partitions") or ()),
                               idle_cpus=json_int(rec.get("idle_cpus"), None))
    return nodes


def slurm_minutes_s(text: str) -> int | None:
    """A Slurm time limit as `scontrol show partition` prints MaxTime ("UNLIMITED", "30",
    "1:30:00", "2-00:00:00", "2-12") in seconds; None for no limit or a form not recognised (a
    check that depends on it is then skipped, never failed)."""
    t = (text or "").strip()
    if not t or t.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, rest = t.rpartition("-")
    try:
        d = int(days) if days else 0
        parts = [int(x) for x in rest.split(":")]
    except ValueError:
        return None
    if days:  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        h, m, sec = parts[:3]
    elif len(parts) == 1:  # minutes
        h, m, sec = 0, parts[0], 0
    elif len(parts) == 2:  # minutes:seconds
        h, m, sec = 0, parts[0], parts[1]
    else:  # hours:minutes:seconds
        h, m, sec = parts[:3]
    return ((d * 24 + h) * 60 + m) * 60 + sec


def parse_controller_config(text: str) -> dict:
    """`scontrol show config` -> {name: value text}: the `Name = value` lines of its first block
    (later blocks, such as the cgroup settings, do not override a name already read)."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        name = name.strip()
        if sep and name and " " not in name:
            out.setdefault(name, value.strip())
    return out


def partition_fields(text: str) -> dict:
    """`scontrol -o show partition` lines -> {name: {setting: text}}."""
    out = {}
    for line in text.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if fields.get("PartitionName"):
            out[fields["PartitionName"]] = fields
    return out


def parse_partitions(text: str, nodes: dict) -> dict:
    """`scontrol -o show partition` lines -> {name: Partition} (node lists from sinfo's nodes)."""
    out = {}
    for name, fields in partition_fields(text).items():
        members = tuple(n for n, info in nodes.items() if name in info.partitions)
        tier = fields.get("PriorityTier", "")
        whole = [f"{k}={fields[k]}" for k, v in (("OverSubscribe", "EXCLUSIVE"), ("ExclusiveUser", "YES"))
                 if fields.get(k, "").upper() == v]
        out[name] = Partition(name, fields.get("State", "UP").upper() == "UP", members,
                              sum(nodes[n].gpus for n in members), slurm_minutes_s(fields.get("MaxTime", "")),
                              fields.get("MaxTime", ""), int(tier) if tier.isascii() and tier.isdigit() else None,
                              fields.get("PreemptMode", ""), ", ".join(whole), fields.get("OverTimeLimit", ""),
                              {k: fields[k] for k in ("AllowAccounts", "DenyAccounts", "AllowQos", "DenyQos")
                               if k in fields}, fields.get("State", "").upper())
    return out


def tres_gpus(items) -> int:
    """GPUs in a TRES list (sacct's `requested` or `allocated`): the untyped `gres/gpu` entry, else
    the sum of the typed ones (a site whose AccountingStorageTRES tracks only `gres/gpu:TYPE`); a
    job of shards alone counts one GPU."""
    total, typed, shard = None, 0, False
    for item in items or []:
        if not isinstance(item, dict) or item.get("type") != "gres":
            continue
        name = str(item.get("name") or "")
        count = json_int(item.get("count"), 0) or 0
        if name == "gpu":
            total = max(total or 0, count)
        elif name.startswith("gpu:"):
            typed += count
        elif (name == "shard" or name.startswith("shard:")) and count:
            shard = True
    gpus = total if total is not None else typed
    # a job of shards (lucidd's GPU packing, docs/deploy.md) holds part of one GPU: counted as one
    return gpus or (1 if shard else 0)


def sacct_state(value) -> str:
    """sacct's job `state` (its `current`) as one upper-case word. 22.05 writes one word; 23.11 on
    write a list of flags, the base state first: a requeued run, which slurmdbd stores as
    JOB_PENDING | JOB_REQUEUE, is ["PENDING", "REQUEUED"]. A list with a requeue flag reads as that
    flag (as 22.05 wrote it; read by its first word, every profiled job's first run was PENDING,
    never finished), any other as its base state."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, (list, tuple)):
        words = [str(w).upper() for w in value if w]
        return next((w for w in words if w.startswith("REQUEUE")), words[0] if words else "")
    return str(value or "").upper()


def sacct_rows(data: dict) -> list[dict]:
    """`sacct --json` jobs -> plain rows (one per job allocation; steps ignored)."""
    rows = []
    for rec in data.get("jobs") or []:
        try:
            t = rec.get("time") or {}
            state = rec.get("state")
            tres = rec.get("tres") or {}
            # requested first: live jobs are seen with what they asked for (an --exclusive job asking
            # for 1 GPU is allocated all of a node's), and the models compare the two
            gpus = tres_gpus(tres.get("requested")) or tres_gpus(tres.get("allocated"))
            comment = rec.get("comment") or {}
            rows.append({
                "job_id": int(rec["job_id"]), "name": rec.get("name") or "", "user": rec.get("user") or "",
                "account": rec.get("account") or "", "partition": rec.get("partition") or "",
                "state": sacct_state(state),
                "gpus": gpus, "submit_time": json_time(t.get("submission")), "start_time": json_time(t.get("start")),
                "end_time": json_time(t.get("end")), "elapsed_s": json_int(t.get("elapsed"), 0) or 0,
                "limit_min": json_int(t.get("limit"), None),
                "comment": (comment.get("job") if isinstance(comment, dict) else comment) or "",
                "admin_comment": (comment.get("administrator") if isinstance(comment, dict) else "") or "",
                "array_job_id": json_int((rec.get("array") or {}).get("job_id"), 0) or 0,
                "nodes": rec.get("nodes") or "",
            })
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("sacct: skipped a record lucidd cannot read (%s)", exc)
    return rows


# ----- the backend ------------------------------------------------------------------------------

BEGIN_MARGIN_S = 60  # a begin time this far past its submission and now is a --begin (LiveJob.begins_later)

class SlurmBackend(Backend):
    name = "slurm-cli"

    def __init__(self, runner: SlurmRunner | None = None, clock=time.time):
        self.runner = runner or SlurmRunner()
        self.clock = clock

    def snapshot(self) -> ClusterSnapshot:
        now = int(self.clock())
        jobs = parse_squeue(self.runner.run_json(["squeue", "--json"]))
        for j in jobs:
            # a minute's margin: a job's begin time is its submission when it asks for none, and one
            # submitted after `now` was read (or a clock a little behind slurmctld's) is no --begin job
            j.begins_later = j.begin_time is not None and j.begin_time > max(now, j.submit_time) + BEGIN_MARGIN_S
        nodes = parse_sinfo(self.runner.run_json(["sinfo", "--json"]))
        parts = parse_partitions(self.runner.run(["scontrol", "-o", "show", "partition"]), nodes)
        return ClusterSnapshot(now, jobs, parts, nodes)

    def job_states(self, job_ids) -> dict:
        ids = ",".join(str(int(j)) for j in job_ids)
        if not ids:
            return {}
        # text, not --json: 22.05's squeue --json ignores -j and lists every job
        try:
            out = self.runner.run(["squeue", "-h", "-t", "all", "-j", ids, "-O",
                                   "JobID:|,State:|,StartTime:|,RestartCnt:|"], env={"SLURM_TIME_FORMAT": "%s"})
        except SlurmCommandError as exc:
            if "invalid job id" in str(exc).lower():
                return {}  # none of them is known any more (each ended and was purged)
            raise
        states = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 4 or not parts[0].isdigit():
                continue
            start = int(parts[2]) if parts[2].isdigit() else None  # N/A: not started
            states[int(parts[0])] = (parts[1], start, int(parts[3]) if parts[3].isdigit() else 0)
        return states

    def partition_names(self) -> set:
        return set(self._partitions())

    def _partitions(self) -> dict:
        return parse_partitions(self.runner.run(["scontrol", "-o", "show", "partition"]), {})

    def controller_boot_time(self) -> int | None:
        value = self.controller_config().get("BOOT_TIME", "")
        return int(value) if value.isdigit() else None

    def controller_config(self) -> dict:
        # times as Unix seconds, whatever the admin's SLURM_TIME_FORMAT and the time zone (local text
        # is ambiguous in the hour a DST change repeats, and unreadable in a custom format)
        out = self.runner.run(["scontrol", "show", "config"], env={"SLURM_TIME_FORMAT": "%s"})
        return parse_controller_config(out)

    def partition_max_times(self) -> dict:
        return {name: p.max_time for name, p in self._partitions().items()}

    def partition_settings(self) -> dict:
        return partition_fields(self.runner.run(["scontrol", "-o", "show", "partition"]))

    def finished_jobs(self, since: int, until: int | None = None) -> list[dict]:
        def stamp(t):
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(max(0, int(t))))

        # No --state filter: with one, sacct matches states *at* the start time only.
        argv = ["sacct", "--json", "--allusers", "--starttime", stamp(since)]
        if until is not None:
            argv += ["--endtime", stamp(until)]
        data = self.runner.run_json(argv)
        return [r for r in sacct_rows(data) if r["end_time"] and r["state"] not in ("RUNNING", "PENDING",
                                                                                     "REQUEUED", "SUSPENDED")]

    def move(self, job_ids, partition: str, start_now: bool = False, exclude: str | None = None,
             het_leader_only: bool = False) -> None:
        ids = ",".join(f"{int(j)}+0" if het_leader_only else str(int(j)) for j in job_ids)
        argv = ["scontrol", "update", f"jobid={ids}", f"partition={partition}"]
        if start_now:
            argv.append("starttime=now")
        if exclude is not None:  # one update: the job never sits in the new partition unsteered
            argv.append(f"excnodelist={exclude}")
        self.runner.run(argv)

    def requeue(self, job_id) -> None:
        # `Incomplete`: slurmctld requeues the job only if it has not ended by the time it takes the
        # request (else it does nothing, exit 0). Plain `scontrol requeue` also requeues a COMPLETED
        # batch job, which then runs again from the start; lucidd checks the state right before, and
        # this closes the milliseconds between that check and the request.
        self.runner.run(["scontrol", "requeue", "Incomplete", str(int(job_id))])

    def signal(self, job_id, signal: str, batch_only: bool) -> None:
        # as `sbatch --signal`: B: to the batch shell alone, else to the job's steps (scancel's
        # default for a signal other than KILL)
        if signal not in WARNING_SIGNALS:
            raise ValueError(f"signal {signal!r} is not one lucidd sends")
        self.runner.run(["scancel", f"--signal={signal}", *(["--batch"] if batch_only else []), str(int(job_id))])

    def set_shards(self, job_ids, count: int) -> None:
        count = int(count)
        if count not in (1, 2):  # never 0: a zero shard record crashes slurmctld 22.05 (SIGFPE)
            raise ValueError(f"shard count {count}: lucidd sets only 1 (may share) or 2 (a GPU of its own)")
        # untyped, count only, one call: the form that leaves no zero record and keeps Slurm's own
        # placement (first-fit: a 1-shard job joins the lowest GPU of the node with a free shard)
        ids = ",".join(str(int(j)) for j in job_ids)
        self.runner.run(["scontrol", "update", f"jobid={ids}", f"gres=shard:{count}"])

    def set_site_factor(self, job_ids, value: int) -> None:
        value = int(value)
        if not SITE_FACTOR_MIN <= value <= SITE_FACTOR_MAX:  # Slurm would silently take garbage
            raise ValueError(f"site factor {value} outside {SITE_FACTOR_MIN}..{SITE_FACTOR_MAX}")
        ids = ",".join(str(int(j)) for j in job_ids)
        self.runner.run(["scontrol", "update", f"jobid={ids}", f"sitefactor={value}"])

    def set_partition_up(self, name: str, up: bool) -> None:
        self.runner.run(["scontrol", "update", f"partitionname={name}", f"state={'UP' if up else 'DOWN'}"])

    def call_counts(self) -> dict:
        return dict(self.runner.calls)


def make_backend(kind: str = "auto", **runner_kw) -> Backend:
    """`auto`: pyslurm when it imports and matches the running Slurm, else the CLI backend."""
    if kind in ("auto", "pyslurm"):
        from .pyslurm_backend import pyslurm_unavailable_reason

        why = pyslurm_unavailable_reason()
        if why is None:
            from .pyslurm_backend import PySlurmBackend

            return PySlurmBackend()
        if kind == "pyslurm":
            raise BackendError(f"[slurm] backend = pyslurm: {why}", transient=False)
        log.debug("pyslurm not used: %s", why)
    return SlurmBackend(SlurmRunner(**runner_kw))
