"""What a live backend hands the daemon, and what it must be able to do.

The reconcile loop and the policies above it see only these plain objects: a backend (Slurm's CLI
today, pyslurm where it matches the running Slurm) turns cluster state into them and applies
actions. Nothing here calls a clock or a subprocess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import LucidError

#: where lucidd's job_submit.lua records the partition a user asked for (lucidd/data/slurm/).
PARTITION_TAG = "lucid:partition="
#: a job whose comment holds this never goes through the profiling partition.
NOPROFILE_TAG = "lucid:noprofile"
# `--comment "lucid:signal=[B:]SIG@SECONDS"`: the job asks lucidd for a warning signal before its
# profiling run is requeued, as `sbatch --signal` would give it before its time limit (Slurm's
# requeue sends no such warning, and 22.05 does not report a job's --signal to lucidd).
SIGNAL_TAG_RE = re.compile(r"(?:^|[\s,;])lucid:signal=(B:)?(?:SIG)?([A-Z][A-Z0-9]*)@([0-9]+)(?=[\s,;]|$)", re.IGNORECASE)
# Signals a job may ask for: those a checkpointing job traps (not KILL or STOP, which cannot be).
WARNING_SIGNALS = ("USR1", "USR2", "URG", "HUP", "INT", "ALRM", "TERM", "CONT")

_PARTITION_RE = re.compile(re.escape(PARTITION_TAG) + r"([^\s]+)")
#: where job_submit.lua records a 1-GPU request it turned into shards for GPU packing
#: (`lucid:orig=tres_per_node=gres:gpu:1`): only such jobs may have their shard count changed.
PACKING_TAG = "lucid:orig="


class BackendError(LucidError):
    """The cluster could not be read or changed. `transient` errors are retried next cycle."""

    def __init__(self, message, transient: bool = True):
        super().__init__(message)
        self.transient = transient


# Job states as Slurm names them; the daemon treats anything not pending/running as ended.
# SPECIAL_EXIT: requeued and held by RequeueExitHold (an exit code slurm.conf names): pending, not
# ended (a review saw its record closed as finished while the job waited for its release)
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "SIGNALING",
                           "STAGE_OUT"})


def partition_names(partitions: str | None) -> list:
    """The partitions of a Slurm partition list: `sbatch -p main,research` waits in both, and
    squeue shows such a pending job's partition as "main,research" (a dict keyed by that string
    matched no partition of any node)."""
    return [p for p in (partitions or "").split(",") if p]


def next_rank(counts: dict, partitions: str | None) -> tuple[int, str]:
    """The queue rank of the next job in priority order that waits in `partitions`, counted in
    `counts` (partition -> jobs ranked there so far, updated): a job of `-p main,research` takes a
    place in each, and its rank is its best one, with that partition. Counted per whole list string,
    a list job ranked among list jobs only (1st in "main,research" while 9 jobs of main were ahead)."""
    best = None
    for part in partition_names(partitions) or [partitions or ""]:
        counts[part] = counts.get(part, 0) + 1
        if best is None or counts[part] < best[0]:
            best = (counts[part], part)
    return best


def never_ran(start: int | None, end: int | None, nodes) -> bool:
    """Whether a finished job's record is of a run that never happened. Slurm gives a job that ended
    before it was given nodes a start equal to its end and no nodes: cancelled (or past its
    deadline) while pending, or FAILED at submission (an sbatch Slurm refused still reaches
    slurmdbd; an admin trial imported one as a 0 s, 20-GPU job). One that ended in its first second
    on a node did run. `nodes`: sacct's node list ("None assigned" when none) or squeue's names."""
    if start is None:
        return True
    no_nodes = not nodes or nodes in ("None assigned", "(null)")
    return end is not None and start >= end and no_nodes


# Pending reasons under which a job waits for something other than GPUs to free: a QOS or
# association limit of its user or account, a reservation, nodes it may not use (ReqNodeNotAvail),
# licenses, its array's task limit, or a limit of its partition it can never meet. Such a job holds
# no claim on free GPUs (a review on the test cluster: jobs at their user's QOS limit filled profiling's room, and
# kept another user's job in the inbox on an idle cluster).
# Reasons under which a job never starts where it is (a limit of its partition it can never meet).
# BadConstraints: more GPUs (or features) than the partition's nodes have, which the inbox (over
# every node) accepted at submission where Slurm would have refused the job in its own partition;
# MaxMemPerLimit: more memory per CPU or node than the partition allows (a review).
CANNOT_RUN_THERE = frozenset({"PartitionConfig", "AccountNotAllowed", "QOSNotAllowed", "InvalidAccount",
                              "InvalidQOS", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
                              "MaxMemPerLimit"})
_NOT_FOR_GPUS = CANNOT_RUN_THERE | {"ReqNodeNotAvail", "Reservation", "Licenses", "JobArrayTaskLimit"}


def waits_for_other_than_gpus(reason: str | None) -> bool:
    """Whether a pending job's reason (squeue's) says it waits for something other than free GPUs."""
    r = (reason or "").split(",", 1)[0].strip()  # "ReqNodeNotAvail, May be reserved for other job"
    return r in _NOT_FOR_GPUS or r.startswith(("QOS", "Assoc"))


@dataclass
class LiveJob:
    """One job as slurmctld reports it (times are Unix seconds; None when not set)."""

    job_id: int
    name: str = ""
    user: str = ""
    account: str = ""
    qos: str = ""  # "" when not reported
    partition: str = ""
    state: str = "PENDING"
    reason: str = ""
    gpus: int = 0
    nodes: int = 1
    cpus: int = 0
    submit_time: int = 0  # Slurm resets this on requeue: the daemon keeps the original itself
    start_time: int | None = None
    end_time: int | None = None
    time_limit_s: int | None = None  # None: no limit (UNLIMITED)
    restart_count: int = 0
    requeue: bool = True  # False for --no-requeue jobs: Slurm refuses to requeue them
    comment: str = ""
    admin_comment: str = ""
    array_pending: bool = False  # a not yet split array record (one record for many tasks)
    # a task's array id (0: not an array). The last pending task keeps the array's own id, with no task
    # string left: a call on that id (a move, a requeue) reaches every task of the array (seen on 22.05)
    array_job_id: int = 0
    priority: int = 1  # 0: held (by its user or an admin)
    nice: int = 0  # sbatch --nice / scontrol update nice=: subtracted from the priority Slurm computes
    dependency: str = ""  # sbatch --dependency, as Slurm reports it ("" when none is left)
    reservation: str = ""  # sbatch --reservation ("" when none)
    required_nodes: str = ""  # sbatch --nodelist, as Slurm reports it
    excluded_nodes: str = ""  # sbatch --exclude, or the ExcNodeList lucidd set to steer a borrowed run
    node_names: tuple = ()  # the nodes it runs on (empty while pending)
    exclusive: bool = False  # --exclusive: it takes whole nodes, whatever GPUs it asks for
    het_job_id: int = 0  # a heterogeneous job's leader id (0: not one); Slurm lists each component
    het_job_offset: int = 0  # the component's index (0: the leader, which lucidd acts through)
    batch: bool = True  # False for an interactive allocation (salloc, srun): Slurm requeues only batch jobs
    deadline: int | None = None  # sbatch --deadline (Unix seconds): Slurm cancels the job if it cannot end by then
    begin_time: int | None = None  # when Slurm lets it start at the earliest (`--begin`; squeue's eligible_time)
    # its begin time lies ahead, as the backend's snapshot saw it (reason BeginTime comes only once
    # Slurm's scheduler has looked at the job: right after a slurmctld restart it said PartitionDown,
    # and a --begin job was admitted to profiling; a review)
    begins_later: bool = False
    shards: int = 0  # shards per node it asks for (GPU packing: 2 = a GPU of its own, 1 = may share one)

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def ended(self) -> bool:
        return not (self.pending or self.active)

    @property
    def requested_partition(self) -> str | None:
        """The partition the user asked for, as job_submit.lua recorded it (None: no -p)."""
        m = _PARTITION_RE.search(self.admin_comment or "")
        return m.group(1) if m else None

    @property
    def packable(self) -> bool:
        """A 1-GPU request job_submit.lua turned into shards (GPU packing, docs/deploy.md): lucidd
        may lower it to one shard (it may then share its GPU) and raise it again while it waits."""
        return PACKING_TAG in (self.admin_comment or "") and self.shards > 0 and self.nodes == 1

    @property
    def lowered(self) -> bool:
        """Waiting at the one shard lucidd lowered it to, on any node count (an admin may have given
        it more nodes since: then it is no longer `packable`, and still shares)."""
        return self.pending and self.shards == 1 and PACKING_TAG in (self.admin_comment or "")

    @property
    def opted_out_of_profiling(self) -> bool:
        return NOPROFILE_TAG in (self.comment or "")

    @property
    def requeue_warning(self) -> tuple[str, bool, int] | None:
        """(signal name, batch shell only, seconds before the requeue) that the job asked for with
        `lucid:signal=[B:]SIG@SECONDS` in its comment, or None (also for a signal lucidd does not send)."""
        m = SIGNAL_TAG_RE.search(self.comment or "")
        if m is None or m.group(2).upper() not in WARNING_SIGNALS:
            return None
        return m.group(2).upper(), bool(m.group(1)), int(m.group(3))

    @property
    def waits_for_begin_time(self) -> bool:
        """Pending until a begin time its owner set (`--begin`; Slurm's reason BeginTime): it waits
        for the clock, not for GPUs."""
        return self.pending and (self.reason == "BeginTime" or self.begins_later)

    @property
    def het_component(self) -> bool:
        """A component of a heterogeneous job other than its leader: Slurm moves, requeues and
        starts it with the leader, and refuses most requests made to it alone."""
        return bool(self.het_job_id) and self.het_job_id != self.job_id

    @property
    def held(self) -> bool:
        """Held by a user or an admin (priority 0, or a JobHeld* reason): it waits for its release,
        not for GPUs."""
        return self.priority == 0 or self.reason.startswith("JobHeld")


@dataclass
class Partition:
    name: str
    up: bool
    nodes: tuple = ()
    total_gpus: int = 0
    max_time_s: int | None = None  # MaxTime (None: UNLIMITED, or not said)
    max_time: str = ""  # MaxTime as Slurm prints it, which tells UNLIMITED from a form not read
    priority_tier: int | None = None  # PriorityTier (None: not said)
    preempt_mode: str = ""  # PreemptMode as Slurm prints it (the cluster's own where the partition sets none)
    # OverSubscribe=EXCLUSIVE or ExclusiveUser=YES: its jobs get whole nodes (of their own, or their
    # user's), which a profiling run does not: "" when neither, else the setting as Slurm prints it
    whole_nodes: str = ""
    over_time: str = ""  # the partition's own OverTimeLimit as Slurm prints it ("NONE": the cluster's)
    # AllowAccounts, DenyAccounts, AllowQos, DenyQos as Slurm prints them ({}: none said): Slurm checks
    # them against a job's partition, and the inbox and profiling let every account and QOS in
    access: dict = field(default_factory=dict)
    state: str = ""  # State as Slurm prints it (UP, DOWN, DRAIN, INACTIVE; "": not said)

    def refuses(self, account: str, qos: str) -> str | None:
        """The setting of `access` that keeps out a job of this account and QOS (Slurm's words: "" and
        ALL are everyone), else None; an account or QOS not known ("") is not judged. Slurm keeps
        account and QOS names in lower case."""
        for setting, name in (("AllowAccounts", account), ("DenyAccounts", account),
                              ("AllowQos", qos), ("DenyQos", qos)):
            listed = self.access.get(setting, "").strip()
            if not name or listed.upper() in ("", "ALL"):
                continue
            inside = name.lower() in {n.strip().lower() for n in listed.split(",")}
            if inside == setting.startswith("Deny"):
                return f"{setting}={listed}"
        return None


@dataclass
class NodeGPUs:
    name: str
    gpus: int
    used: int
    state: str = ""
    partitions: tuple = ()
    idle_cpus: int | None = None  # None: not reported

    @property
    def free_gpus(self) -> int:
        """GPUs a job could start on now: none while every CPU of the node is taken (a CPU-only job
        can fill a GPU node; a run lent its free GPUs would wait there, admitted, for hours)."""
        return 0 if self.idle_cpus == 0 else max(0, self.gpus - self.used)

    def _words(self) -> tuple[str, set]:
        words = self.state.lower().split("+")
        return words[0].strip("*~#!%$@^-"), set(words[1:])

    @property
    def usable(self) -> bool:
        """A node a job can be started on, now or on demand: not down, drained, failing, not
        responding, reserved or in maintenance (a run steered there waited, ReqNodeNotAvail, for
        room_wait_s: a review). A node Slurm's power saving has powered down is usable: Slurm wakes
        it for the job. Read as unusable, an idle powered-down cluster had no free GPU and no
        profiling room, and every new job waited in the inbox for room_wait_s (2 h by default)."""
        base, flags = self._words()
        if base in ("down", "future", "unknown") or flags & {"not_responding", "maintenance", "reserved"}:
            return False
        return not any("drain" in w or "fail" in w for w in (base, *flags))

    @property
    def asleep(self) -> bool:
        """Powered down, or powering down or up, by Slurm's power saving: usable, but a job there
        waits for its boot first (profiling borrows no such node: it would wake it for a short run)."""
        return "~" in self.state.split("+")[0] or any(w.startswith("power") for w in self._words()[1])


@dataclass
class ClusterSnapshot:
    """One consistent read of the cluster: what a reconcile cycle decides on."""

    now: int
    jobs: list = field(default_factory=list)  # [LiveJob]
    partitions: dict = field(default_factory=dict)  # name -> Partition
    nodes: dict = field(default_factory=dict)  # name -> NodeGPUs

    def job(self, job_id) -> LiveJob | None:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        return None


class Backend:
    """A live cluster. Reads are one call each per cycle; writes change only what they name."""

    name = "backend"

    def snapshot(self) -> ClusterSnapshot:
        raise NotImplementedError

    def job_states(self, job_ids) -> dict:
        """job id -> (state, start time, restart count) as slurmctld has them *now*, for the jobs it
        still knows (a purged one is left out): lucidd asks right before a requeue, which Slurm
        makes even of a job that has ended (it then runs again). This default reads a snapshot."""
        want = {int(j) for j in job_ids}
        return {j.job_id: (j.state, j.start_time, j.restart_count) for j in self.snapshot().jobs if j.job_id in want}

    def partition_names(self) -> set:
        """The partitions Slurm has (a start checks lucidd's own against them). Reads a snapshot here."""
        return set(self.snapshot().partitions)

    def controller_boot_time(self) -> int | None:
        """When slurmctld last started (Unix seconds), None when unknown. After a restart it shows a
        job that ended while it was down as RUNNING until the node's completion message arrives."""
        return None

    def controller_config(self) -> dict:
        """slurmctld's running settings as `scontrol show config` prints them ({name: text}), {} when
        this backend cannot tell (lucidd then checks none of them)."""
        return {}

    def partition_max_times(self) -> dict:
        """{partition: its MaxTime as Slurm prints it ("UNLIMITED", "7-00:00:00", ...)}; {} when
        this backend cannot tell."""
        return {}

    def partition_settings(self) -> dict:
        """{partition: {setting: text}} as `scontrol show partition` prints them; {} when this
        backend cannot tell."""
        return {}

    def finished_jobs(self, since: int, until: int | None = None) -> list[dict]:
        """Jobs that ended since `since` (accounting), as plain trace rows; with `until`, those that
        were running or ended between the two (a job may come in two windows that meet)."""
        raise NotImplementedError

    def move(self, job_ids, partition: str, start_now: bool = False, exclude: str | None = None,
             het_leader_only: bool = False) -> None:
        """Set the jobs' partition (and BeginTime=now); `exclude`: also set their ExcNodeList to these
        nodes ("": clear it; None: leave it as it is). `het_leader_only`: the ids are heterogeneous
        jobs' leaders, and only the leader moves (`jobid=L+0`); by its plain id Slurm moves every
        component of the job with it (seen on 22.05)."""
        raise NotImplementedError

    def requeue(self, job_id) -> None:
        """Requeue the job if it has not ended (a job that ended meanwhile is left alone, silently)."""
        raise NotImplementedError

    def signal(self, job_id, signal: str, batch_only: bool) -> None:
        """Send a running job a signal: to its batch shell (batch_only) or to its steps, as
        `sbatch --signal=[B:]SIG` would."""
        raise NotImplementedError

    def set_shards(self, job_ids, count: int) -> None:
        """Change the shard count of pending jobs of shards (GPU packing): 1 lets it share a GPU,
        2 gives it one of its own. A count change only, in one call (a zero count or a type change
        crashes slurmctld 22.05: ../shared/notes/slurm-live-mechanisms.md G.3.3)."""
        raise NotImplementedError

    def set_site_factor(self, job_ids, value: int) -> None:
        raise NotImplementedError

    def set_partition_up(self, name: str, up: bool) -> None:
        raise NotImplementedError

    def call_counts(self) -> dict:
        return {}
