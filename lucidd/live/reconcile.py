"""The reconcile loop: read the cluster, decide, apply only the difference, record why.

This is the daemon's core. It knows Slurm's mechanics (the inbox, the requeue cycle and its
traps) and lucidd's state; it does not know Lucid. Decisions come from a *decider* (by default
`orchestrator.live:LucidDecider`), a pure function of plain data (`DecisionInput`) returning a
`Plan`. One cycle:

1. `backend.snapshot()`: squeue/sinfo/partitions, one call each.
2. Register jobs seen for the first time (original submit time, requested partition), close
   jobs that ended (a job that ended inside Tprof never reaches its partition), and bring a record
   that disagrees with where Slurm has the job back in line (`_adopt`: a move lucidd made but did
   not record, a job requeued back into the inbox).
3. Requeue mechanics: a profiled job that lucidd requeued is moved to its partition with
   `starttime=now` only once it is PENDING and the requeue is at least one whole second old
   (Slurm kills a job restarted within the same second as FAILED).
4. The decider: admit to profiling (least GPUs first, within capacity, or on GPUs nobody waits
   for: those moves carry an ExcNodeList of the other nodes), release to the partition without
   profiling, requeue at Tprof, SiteFactor per pending job. A job leaving profiling loses the
   ExcNodeList lucidd gave it.
5. Apply: every action is written first (with an idempotency key), then sent to Slurm, then
   marked applied; a key already applied is never sent again, and each action re-checks the
   job's live state, so a restart never requeues a job twice.

Fail-open: lucidd never holds a job in a way Slurm cannot finish without it. `open_inbox` (used
on orderly stop, on database loss, and by `lucidd-failopen`) releases every job it holds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field, replace

from ..backends.base import (CANNOT_RUN_THERE, Backend, BackendError, ClusterSnapshot, LiveJob, never_ran,
                             partition_names, waits_for_other_than_gpus)
from ..errors import ConfigError, LucidError
from .store import CycleRow, JobRow, Store, StoreError

log = logging.getLogger("lucidd")



def _cannot_run_there(reason: str) -> bool:
    """A pending reason under which the job never starts where it is: a limit of its partition, or a
    per-job limit of its QOS or association (QOSMaxGRESPerJob, AssocMaxCpuPerJobLimit, ...), which
    plain Slurm refuses at submission with DenyOnLimit and the inbox accepted (a review)."""
    # (Slurm 22.05 lets lucidd's move through and reports these instead of refusing it)
    return reason in CANNOT_RUN_THERE or (reason.startswith(("QOSMax", "AssocMax")) and "PerJob" in reason)


# ----- what the decider sees and returns (plain data) -------------------------------------------

@dataclass
class DecisionInput:
    now: int
    inbox: list  # [LiveJob] waiting in the inbox, not yet decided
    profiling: list  # [LiveJob] in the profiling partition (running or waiting to start)
    waiting: list  # [LiveJob] pending in a managed partition (or being released there now)
    records: dict  # job_id -> JobRow (original submit time, target partition, estimate...)
    profiling_gpus: int  # usable GPUs of the profiling partition's nodes
    queued: dict = field(default_factory=dict)  # partition -> jobs pending there (waiting, by partition)
    free_gpus: dict = field(default_factory=dict)  # partition -> most free GPUs on one of its usable nodes
    # GPUs profiling may borrow ([profiler] lend_idle_gpus): free on usable nodes whose managed
    # partitions nobody waits in; and the most on one such node (a lent run needs them on one node)
    lendable_gpus: int = 0
    lendable_node_gpus: int = 0
    busy_nodes: frozenset = frozenset()  # profiling partition's nodes whose managed partitions someone waits in
    # busy node -> the longest a job waiting in one of its managed partitions has waited since its
    # original submission, s ([profiler] keep_lent_while_idle reclaims a lent run kept past its Tprof
    # once that reaches long_tprof_s); None: unknown, every busy node counts as waited for that long
    node_wait_s: dict | None = None
    # seconds (monotonic) since lucidd's last successful cycle; in the first cycle after a start, since
    # the last one stored in the database (wall clock), None when there is none.
    # Whether lucidd was away is measured here, not from Slurm's times: a clock step moves those.
    away_s: float | None = None
    # of away_s, seconds lucidd kept trying every cycle while Slurm did not answer (a slurmctld restart
    # or upgrade, a network cut): the run's extra work is bounded by the outage, not lucidd's absence.
    # None: not such an outage (or the simulator).
    slurm_silent_s: float | None = None
    # (job_id, restart count, Tprof the warning was for) -> when it was sent: the warnings jobs asked
    # for (lucid:signal=) that lucidd has sent, for the runs in profiling that asked for one
    signalled: dict = field(default_factory=dict)
    # job_id -> the NVML figures of its profiling run (store.GpuProfileRow), for the waiting jobs of
    # shards (GPU packing: LiveJob.packable) only
    gpu_profiles: dict = field(default_factory=dict)
    # partition -> {GPU node: its smallest GPU's memory in MiB as its NVML sampler said, or None},
    # read when some waiting job is one of shards and [packing] is enabled with gpu_memory_mib = 0
    gpu_memory: dict = field(default_factory=dict)
    # partition -> the most GPUs on one of its nodes (usable or not: the partition's shape), for the
    # starvation guard of a job of several nodes ([ordering] starvation_node_cap)
    node_gpus: dict = field(default_factory=dict)
    # Slurm's OverTimeLimit, s (None: UNLIMITED): how long past its own limit a run may go on
    over_time_limit_s: int | None = 0
    # seconds since the profiling partition last had a usable GPU (0 while it has one; None: not
    # tracked, as in the simulator: each job's own wait counts)
    profiling_gpus_gone_s: float | None = None
    # partitions that cannot start a job now: not UP (DOWN, DRAIN, INACTIVE), or with nodes and
    # none of them usable (down, drained, reserved); lucidd's own two are never in it
    closed_partitions: frozenset = frozenset()


@dataclass
class Plan:
    profile: list = field(default_factory=list)  # [(job_id, reason)]
    lend: list = field(default_factory=list)  # [job_id]: of `profile`, those admitted on borrowed GPUs
    release: list = field(default_factory=list)  # [(job_id, reason)]: skip profiling
    requeue: list = field(default_factory=list)  # [(job_id, reason)]: Tprof reached
    abandon: list = field(default_factory=list)  # [(job_id, reason)]: leave to finish in profiling
    signal: list = field(default_factory=list)  # [(job_id, signal, batch_only, Tprof, reason)]: warn before the requeue
    site_factors: dict = field(default_factory=dict)  # job_id -> (value, rank, reason)
    estimates: dict = field(default_factory=dict)  # job_id -> (seconds, source)
    # job_id -> (shard count, reason): GPU packing of a waiting job of shards (1: may share a GPU,
    # 2: a GPU of its own); applied only where the job's count differs
    shards: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


class Decider:
    """The interface the daemon calls; `orchestrator.live.LucidDecider` implements it."""

    def decide(self, inp: DecisionInput) -> Plan:
        raise NotImplementedError

    def record(self, inp: DecisionInput, plan: Plan) -> dict:
        """A JSON-able copy of one cycle's input and decisions (for replay against the simulator)."""
        return {}

    def background(self, store: Store, now: int) -> str | None:
        """Slow work (model refits) run off the reconcile path; returns a line to log or None."""
        return None

    def explain_estimate(self, store: Store, record: JobRow) -> dict | None:
        """Why `record` got its duration estimate, as data (`lucidctl explain job ID`: an
        estimate_explanation), or None."""
        return None

    def describe_models(self, store: Store) -> dict | None:
        """The decider's models as data (`lucidctl models`), or None when it has none."""
        return None

    def explain_packing(self, store: Store, record: JobRow) -> dict | None:
        """Whether `record` may share a GPU, and why, as data (`lucidctl explain job ID`: a
        packing_explanation), or None when the decider does not pack."""
        return None


def packing_explanation(enabled: bool = False, **fields) -> dict:
    """Decider.explain_packing's answer, every field present (docs/cli.md, `packing`)."""
    return {"enabled": enabled, "may_share": False, "score": None, "class": None, "how": "", "blocker": "",
            "gpu_memory_mib": None} | fields


NOT_ESTIMATED = ("not estimated yet: a job is estimated when it first waits in its partition (jobs in the "
                 "inbox or in profiling have none)")


def estimate_explanation(kind: str = "none", reason: str = "", **fields) -> dict:
    """Decider.explain_estimate's answer, every field present (docs/cli.md, `order.explanation`)."""
    return {"kind": kind, "model_version": None, "model_seconds": None, "intercept": None, "terms": [],
            "reason": reason, "matches_estimate": None} | fields


def load_decider(spec: str, config) -> Decider:
    import importlib

    module, _, cls = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), cls)(config)
    except (ImportError, AttributeError, TypeError) as exc:  # TypeError: `module:name` is not a class
        raise ConfigError(f"[daemon] decider: cannot load {spec!r} ({exc})") from None


# ----- the loop -----------------------------------------------------------------------------

# Words of a reason that mean a job needs an admin (`lucidctl status` lists such jobs): lucidd can
# move it nowhere it will run.
REFUSED_MOVE = "Slurm refused to move it"
MAY_NEVER_START = "Slurm may never start it"
_NEVER_START_NOTE = f"; {MAY_NEVER_START} in "  # how a reason is flagged for status' attention list
# scontrol requeue's words for a job that can never be requeued (--no-requeue, not a batch job)
_REQUEUE_NEVER = ("presently disabled", "only batch jobs", "not requeue")
RANK_PREFIX = re.compile(r"^rank \d+ in \S+: ")  # how orchestrator.live's order reason starts
# active states of a run that is ending: their start time is no new start (a requeue completing)
_ENDING_STATES = frozenset({"COMPLETING", "SIGNALING", "STAGE_OUT"})
# How a run another scheduler put in profiling is recorded (profile "abandoned", this reason): this
# lucidd leaves its requeue and release to whoever admitted it (Reconciler._leave_to_other_scheduler)
ADMITTED_ELSEWHERE = "admitted to profiling by another scheduler"
OTHER_SCHEDULER_KEY = "other_scheduler"  # meta: the last finding of one, for `lucidctl status`
OTHER_SCHEDULER_ERROR_S = 600  # its error is logged at most this often (each job gets a warning line)
# job_submit.lua (version 7) leaves salloc and srun allocations in their partition (LiveJob.batch False)
_INTERACTIVE_NOTE = ("; not profiled: an interactive allocation (salloc/srun), which job_submit.lua leaves in "
                     "its partition (Slurm requeues only batch jobs)")


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.getuid()}"


class SlurmDeniesLucidd(LucidError):
    """Slurm refuses lucidd's changes to jobs (Access/permission denied): the user lucidd runs as
    is neither root nor one job_submit.lua lets move jobs (LUCIDD_USERS), or not a Slurm operator.
    Every job would wait in the inbox while lucidd's cycles looked healthy (an admin trial: the
    shipped unit runs lucidd as `slurm`, which job_submit.lua did not know). lucidd stops instead:
    its stop opens the inbox, and Slurm schedules alone."""


def _denied(exc) -> bool:
    return "permission denied" in str(exc).lower()


def _another_job(r: JobRow, j: LiveJob) -> bool:
    """Whether `j` is a job other than the one `r` records, under the same id: another user's, or one never
    restarted whose submit time is not the one recorded (Slurm changes a job's submit time only when it
    restarts it, and counts that in its restart count)."""
    if r.user and j.user and r.user != j.user:
        return True
    return (j.restart_count == 0 and r.restarts == 0 and bool(j.submit_time) and bool(r.original_submit)
            and j.submit_time != r.original_submit)


def _utc(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "-"


def _not_answering(node) -> bool:
    """slurmd on the node does not answer slurmctld (NOT_RESPONDING, or DOWN: Slurm marks a node
    down when it stops answering), so a signal to a job there is not delivered."""
    # whole words: POWER_DOWN, POWERING_DOWN and POWERED_DOWN are flags of nodes that answer
    words = node.state.lower().split("+")
    return "not_responding" in words or words[0].rstrip("*") == "down"


# requeues wait until slurmctld has been up this long (twice slurmstepd's 15 s retry of a job's
# completion message, and a margin): see Reconciler._controller_settling
def grace_s(interval_s: float) -> float:
    """How long lucidd waits before it takes something it sees for lasting: max(60 s, 3 cycles).
    A run this far past its Tprof was left while lucidd was away; a partition that could not start
    a job this long is closed; a restart seen within it is one lucidd can still requeue."""
    return max(60.0, 3 * interval_s)


CONTROLLER_SETTLE_S = 45
REQUEUE_COMPLETING_WAIT_S = 10  # open_inbox waits this long for requeues still completing
SHARDS_RETRY_S = 600  # a shard change Slurm refused is asked again after this long, not every cycle
# sacct reads of the finished-job history (Reconciler.read_history)
HISTORY_CURSOR_KEY = "history_read_to"  # meta: where the sacct reads have got to (Unix seconds)
HISTORY_OVERLAP_S = 3600  # each read starts this much before the last one ended: slurmdbd may record late
HISTORY_FIRST_SPAN_S = 86400  # a backlog's first window
HISTORY_MIN_SPAN_S = 3600
# How often lucidd asks slurmctld for its PreemptType (one `scontrol show config`): each cycle reads
# the partitions' PriorityTier and PreemptMode, which an admin can change at run time
PREEMPT_TYPE_RECHECK_S = 600
PRUNE_BATCH = 20000  # ended jobs (with their actions) and cycles one prune deletes: about a second, even on a first prune
HISTORY_ROWS_WANTED = 4000  # ~25 MB of sacct JSON a window
# GPU packing with [packing] gpu_memory_mib = 0
PARTITION_GPU_NODES_KEY = "partition_gpu_nodes"  # meta: {partition: [its GPU nodes]}, as lucidd last saw them


def partition_gpu_memory(nodes: dict, said: dict) -> dict:
    """partition -> {GPU node: its smallest GPU's MiB or None}, from `nodes` (partition -> [GPU
    nodes]) and what the samplers said (`Store.gpu_nodes()`: node -> GpuNodeRow)."""
    return {part: {n: (said[n].gpu_memory_mib if n in said else None) for n in names}
            for part, names in nodes.items()}


def released_to(requested: str | None, slurm) -> str:
    """Where a job goes when lucidd (or lucidd-failopen) lets it go: the partitions it asked for
    (`-p`, as job_submit.lua recorded them) without lucidd's own two, else the default partition."""
    parts = [p for p in (requested or "").split(",") if p and p not in (slurm.inbox_partition,
                                                                        slurm.profiling_partition)]
    return ",".join(parts) or slurm.default_partition


def _never_start_note(job_id, partition: str, why: str,
                      fix: str = "partition=<one it may use>` or scancel it") -> str:
    """The note a reason gets for a job Slurm may never start in `partition` (`why`: Slurm's words)."""
    return f"{_NEVER_START_NOTE}{partition} ({why}): its owner can `scontrol update jobid={job_id} {fix}"


def _without_never_start(reason: str) -> str:
    """A reason without its may-never-start note (always appended last, with what follows it)."""
    return reason[:reason.index(_NEVER_START_NOTE)] if _NEVER_START_NOTE in reason else reason


#: how the order reason of a job pinned by hand begins (Reconciler._note_pinned_priorities)
PINNED_NOTE = "pinned by hand"
_REWRITE = object()  # Reconciler._pinned: a job whose SiteFactor is to be set once more


class Reconciler:
    def __init__(self, config, backend: Backend, store: Store, decider: Decider, dry_run: bool = False,
                 clock=time.time, monotonic=time.monotonic):
        self.cfg = config
        self.monotonic = monotonic
        self._last_ok_mono = None  # monotonic time of the last successful cycle (DecisionInput.away_s)
        self._last_try_mono = None  # ... and of the last cycle tried, whether Slurm answered or not
        self._longest_try_gap = 0.0  # the longest wait between two cycles tried since the last successful one
        self._slurm_failed = False  # a cycle since the last successful one found Slurm not answering
        # called with the count of changes made so far after each batch Slurm took within a cycle: the
        # daemon feeds systemd's watchdog and the heartbeat with it, since a cycle that changes every
        # job of a full queue (a first start) runs for minutes (44 s at 10,000 jobs on the test cluster)
        self.progress = None
        self._changes_made = 0
        self._next_prune = 0.0  # when old job records and cycles are forgotten next (prune_ended)
        self.backend = backend
        self.store = store
        self.decider = decider
        self.dry_run = dry_run
        self._warned_shadow_inbox = -10 ** 12  # when a dry run last said its inbox holds jobs for nobody
        self._held_back = {}  # job id -> the silent nodes its requeue waits for (logged once per set)
        self._shards_tried = {}  # job id -> (count, restart, when) of the last shard change asked for
        self._settle_logged = None  # the slurmctld start time the requeue hold was logged for
        self._boot_read = None  # (monotonic, slurmctld start time) of the last read
        self._warned_no_boot = False
        self.warns_of_shadow_inbox = True  # False for a check (`--once --dry-run`), beside a live lucidd
        self._warned_no_profiling = False  # a shadow said once that Slurm has no profiling partition
        self._partition_gpu_nodes = None  # what PARTITION_GPU_NODES_KEY was last written with
        self._profiles_on = frozenset()  # the profiling partition's nodes, as of this cycle
        self._preempt_type = None  # slurmctld's PreemptType (None: not read, or could not be)
        self._priority_type = None  # slurmctld's PriorityType, read with PreemptType (None: not read)
        self._priority_judged = None  # the PriorityType the stored warnings were last made to agree with
        # pending jobs whose Slurm priority is below lucidd's SiteFactor (pinned by hand) -> None while the
        # one rewrite of the SiteFactor is being judged, then the order reason the note replaced
        self._pinned: dict = {}
        self._preempt_read = None  # monotonic time of its last read
        self._over_time_cluster_s = 0  # slurmctld's OverTimeLimit, s (None: UNLIMITED), read with PreemptType
        self._over_time_s = 0  # what applies in profiling: its partition's own, else the cluster's
        self._prof_gpus_gone_at = None  # when the profiling partition was first seen without a usable GPU
        self._nodes_outside_inbox = ()  # nodes of ordered partitions the inbox lacks, as last warned of
        self._closed_since = {}  # partition -> since when it has not been able to start a job (_closed_partitions)
        self._profiling_closed_said = None  # why the profiling partition starts no run, as last logged
        self._empty_read_before = False  # the last snapshot listed no job while records were open
        self._preempt_view = None  # the partitions' (name, PriorityTier, PreemptMode) at that read
        # the partitions a profiling run would preempt, as last said (None: not yet this run; the
        # first cycle also clears a finding a lucidd before this one stored)
        self._preempts_said = None
        self.clock = clock
        s = config.slurm
        self.inbox = s.inbox_partition
        self.profiling = s.profiling_partition
        self.default_partition = s.default_partition
        self.managed = set(s.managed_partitions)
        self.last_history_read = 0
        self.history_from = None  # where the next sacct read starts (None: not known until the first)
        self.history_span = HISTORY_FIRST_SPAN_S  # how much of a backlog one sacct read covers
        self.history_failed = False  # the last sacct read failed: the next waits history_interval_s
        self._records = None  # open job records, cached between cycles (see _open_records)
        self._unmovable = {}  # job_id -> (retry at, pause): moves Slurm refused for good (_unmovable_now)
        self._refused = {}  # job_id -> Slurm's error for a release that may have been made anyway (_adopt)
        self._prev_read_at = None  # the time of this process's previous snapshot (None: not yet one)
        self._elsewhere = []  # (time, job id) of the admissions another scheduler made, the last hour
        self._elsewhere_said = -10 ** 12  # when their error was last logged

    # -- helpers --------------------------------------------------------------------------------
    def is_managed(self, partition: str) -> bool:
        if partition in (self.inbox, self.profiling) or not partition:
            return False
        parts = partition.split(",")
        return not self.managed or any(p in self.managed for p in parts)

    def target_partition(self, requested: str | None) -> str:
        return released_to(requested, self.cfg.slurm)

    def _new_row(self, j: LiveJob, now: int) -> JobRow:
        requested = j.requested_partition
        if requested is None and j.partition not in (self.inbox, self.profiling):
            requested = j.partition  # seen outside the inbox (lucidd started on a busy cluster, dry-run)
        # In shadow mode (--dry-run) jobs never wait in an inbox: a new pending job in a managed
        # partition is treated as if it had arrived there, so what lucidd would do is recorded.
        in_inbox = j.partition == self.inbox or (self.dry_run and self.is_managed(j.partition))
        phase = "inbox" if in_inbox and j.pending else "released"
        row = JobRow(job_id=j.job_id, first_seen=now, original_submit=j.submit_time or now,
                     requested_partition=requested, target_partition=self.target_partition(requested),
                     name=j.name, user=j.user, account=j.account, gpus=j.gpus, phase=phase,
                     profile="pending" if phase == "inbox" else "skipped",
                     profile_reason="" if phase == "inbox" else
                     f"first seen in partition {j.partition}" + ("" if j.batch else _INTERACTIVE_NOTE),
                     restarts=j.restart_count)
        if j.partition == self.profiling and j.pending and j.restart_count > 0:
            # a requeued run waiting in profiling, and no record of it (a database lost or replaced):
            # it had its run, so it is released as a requeued one is, not profiled a second time
            row.phase, row.profile, row.restarts, row.requeued_at = "requeued", "requeued", j.restart_count - 1, \
                j.submit_time or now  # Slurm resets the submit time to the requeue's
            row.profile_reason = "found requeued in the profiling partition at start-up, with no record of its run"
        elif j.partition == self.profiling:  # seen in profiling before lucidd recorded it (crash window)
            row.phase, row.profile = "profiling", "admitted"
            row.profile_reason = "found in the profiling partition at start-up"
            # submitted after this process's last read, and in profiling already: the inbox it was
            # routed to had it for less than one cycle, and this lucidd did not move it. (slurmctld's
            # submit time and this host's clock are both whole seconds rounded down, and lucidd runs on
            # the controller: a job submitted in a later second than the read came after it.)
            if (not self.dry_run and self._prev_read_at is not None and j.restart_count == 0
                    and (j.submit_time or 0) > self._prev_read_at):
                self._leave_to_other_scheduler(row, now, "it was submitted after lucidd's previous look at the queue "
                                                   "and was never in the inbox when lucidd looked")
        return row

    def _leave_to_other_scheduler(self, r: JobRow, now: int, evidence: str):
        """A job this lucidd did not admit, found in its profiling partition: something else moves jobs
        out of the inbox, most likely a second lucidd with a database of its own (the instance lock
        only keeps out one on the same database). Two schedulers would each requeue the other's runs
        at their Tprof (a second requeue that lands after the job's restart in its partition kills that
        run: docs/deploy.md, "One lucidd per cluster"). So this one leaves the run to whoever admitted
        it (profile "abandoned": no requeue at Tprof, no withdrawal), says so as an error, and records
        the finding for `lucidctl status`."""
        r.phase, r.profile = "profiling", "abandoned"
        r.profile_reason = (f"{ADMITTED_ELSEWHERE}: {evidence}, and this lucidd's database has no admission of it; "
                            "its requeue and release are left to whoever admitted it")
        self._elsewhere = [(t, jid) for t, jid in self._elsewhere if t > now - 3600] + [(now, r.job_id)]
        log.warning("job %s: %s", r.job_id, r.profile_reason)
        if now >= self._elsewhere_said + OTHER_SCHEDULER_ERROR_S:
            self._elsewhere_said = now
            log.error("%d job(s) in the last hour (the last: job %s) were moved from %s to %s by something other "
                      "than this lucidd: is a second lucidd, with another [database] url, running on this cluster? "
                      "Run one lucidd per cluster (docs/deploy.md, \"One lucidd per cluster\"); until then this one "
                      "leaves those jobs' runs to whoever admitted them", len(self._elsewhere), r.job_id,
                      self.inbox, self.profiling)
        self.store.set_meta(OTHER_SCHEDULER_KEY, json.dumps({"at": now, "jobs_last_hour": len(self._elsewhere),
                                                             "last_job": r.job_id}))

    # -- one cycle ------------------------------------------------------------------------------
    def cycle(self) -> CycleRow:
        t0, c0 = time.perf_counter(), time.process_time()
        calls_before = dict(self.backend.call_counts())
        row = CycleRow(started_at=self.clock(), dry_run=self.dry_run)
        self._changes_made = 0
        mono = self.monotonic()
        away_s = self._away_since_last_run() if self._last_ok_mono is None else mono - self._last_ok_mono
        if self._last_try_mono is not None:
            self._longest_try_gap = max(self._longest_try_gap, mono - self._last_try_mono)
        self._last_try_mono = mono
        # lucidd was here all along, asking every cycle, and only Slurm was silent (not a stopped,
        # killed or frozen lucidd, nor one that paused for its database: those leave a longer gap;
        # nor a new process, whose absence before its start no gap of its own measures)
        silent_s = (away_s if self._last_ok_mono is not None and self._slurm_failed
                    and self._longest_try_gap <= grace_s(self.cfg.daemon.interval_s) else None)
        try:
            snap = self.backend.snapshot()
            row.jobs = len(snap.jobs)
            try:
                row.actions, recorded = self._decide_and_apply(snap, away_s, silent_s)
            except Exception:
                # cut short after the cached records changed (an ended job dropped from them, a phase
                # moved on) and before they were saved: the database no longer holds what the cache
                # does, and an ended job's row stayed open for as long as lucidd ran (a review)
                self._records = None
                raise
            row.recorded = json.dumps(recorded, default=str) if recorded and self.cfg.daemon.record_cycles else None
            row.ok = True
        except BackendError as exc:
            row.ok, row.error = False, f"slurm: {exc}"
            self._slurm_failed = True
            log.warning("cycle skipped, Slurm did not answer: %s (retrying in %gs)", exc, self.cfg.daemon.interval_s)
        row.seconds = time.perf_counter() - t0
        row.cpu_seconds = time.process_time() - c0
        after = self.backend.call_counts()
        row.calls = json.dumps({k: after.get(k, 0) - calls_before.get(k, 0) for k in after
                                if after.get(k, 0) != calls_before.get(k, 0)})
        self.store.add_cycle(row, self.cfg.daemon.record_cycles)  # StoreError propagates to the daemon
        if row.ok:
            self.store.set_meta("last_ok_cycle", f"{row.started_at:.3f}")
            self._last_ok_mono = mono
            self._longest_try_gap, self._slurm_failed = 0.0, False
            self._prune(row.started_at)
        return row

    def _away_since_last_run(self) -> float | None:
        """Before this process's first successful cycle: seconds since the last successful cycle any
        lucidd stored in this database, by the wall clock (the monotonic one starts with the
        process). None when there is none, or it is dated ahead of this clock (a clock stepped
        back: unknown). A restart within seconds (an admin's config change, a standby's takeover)
        had counted as away, and runs past a shortened Tprof were left to run to their end in
        profiling (a review)."""
        try:
            last = self.store.get_meta("last_ok_cycle")
            away = self.clock() - float(last) if last is not None else None
        except (StoreError, ValueError, TypeError):
            return None
        return away if away is not None and away >= 0 else None

    def _prune(self, now: float, limit: int = PRUNE_BATCH):
        """Hourly, forget ended jobs and cycles older than [daemon] keep_days: the jobs and actions
        tables otherwise grow for good (a cluster like Helios' finishes a million jobs in a few
        months, each with a row and its actions; a cycle every 10 s is three million rows a year).
        Jobs are kept at least [models] history_days, the window whose sacct records lucidd matches
        to its own (their original submission). A batch that hits `limit` comes back next cycle."""
        if now < self._next_prune:
            return
        keep = self.cfg.daemon.keep_days * 86400
        try:
            jobs, cycles = self.store.prune_ended(int(now - max(keep, self.cfg.models.history_days * 86400)),
                                                  int(now - keep), limit)
        except StoreError as exc:  # housekeeping: the next cycle's write says whether the database is back
            log.warning("forgetting old job records failed (retried in an hour): %s", exc)
            jobs = cycles = 0
        self._next_prune = now + (0 if max(jobs, cycles) >= limit else 3600)
        if jobs or cycles:
            log.info("forgot %d ended job record(s) and %d cycle(s) older than [daemon] keep_days (%d)",
                     jobs, cycles, self.cfg.daemon.keep_days)

    def _decide_and_apply(self, snap: ClusterSnapshot, away_s: float | None = None,
                          slurm_silent_s: float | None = None):
        now = snap.now
        seen = {j.job_id: j for j in snap.jobs}
        records = self._open_records()
        if not snap.jobs and records and not self._empty_read_before:
            # A well-formed reply that lists no job at all while lucidd follows some: every record would
            # be closed as GONE, and made again at the next read as jobs first seen, a run left to finish
            # in profiling then requeued (a review, with a squeue that answered so once). Jobs that end
            # stay listed MinJobAge (300 s by default): taken for a bad read once; a second one is believed.
            self._empty_read_before = True
            raise BackendError(f"squeue listed no job at all while lucidd follows {len(records)}: taken for a bad "
                               "reply, the next read decides", transient=True)
        self._empty_read_before = False
        self._warn_of_nodes_outside_inbox(snap)
        changed, new_ids = {}, set()
        # 1b. a record whose id Slurm gave to another job (slurmctld restarted without its state, or ids
        # wrapped): taken for the old job, the new one went to the old one's partition unprofiled, or kept
        # its SiteFactor unsent (equal to the old one's) (a review on a test cluster). It is closed, and
        # the new job is registered below as the new job it is.
        for j in snap.jobs:
            r = records.get(j.job_id)
            if r is not None and not j.ended and _another_job(r, j):
                log.warning("job %s: Slurm gave its id to another job (user %s, submitted %s; lucidd's record: "
                            "user %s, submitted %s): the record is closed as GONE, the job seen as new",
                            j.job_id, j.user, _utc(j.submit_time), r.user, _utc(r.original_submit))
                self._close(r, None, now)
                self._save([r])
                self._forget(j.job_id, records)
        # 2. register and close
        for j in snap.jobs:
            if j.ended or j.job_id in records:
                continue
            if j.partition != self.inbox and not self.is_managed(j.partition) and j.partition != self.profiling:
                continue  # partitions lucidd does not manage
            if j.het_component:
                continue  # Slurm moves it with its leader, which lucidd acts through
            r = self._new_row(j, now)
            records[j.job_id] = changed[j.job_id] = r
            new_ids.add(j.job_id)
            if r.phase == "inbox":
                log.info("job %s: new in %s (asked for %s, %d GPU(s), user %s)", j.job_id, self.inbox,
                         r.requested_partition or "no partition", j.gpus, j.user)
        if new_ids:
            # Saved before anything is sent to Slurm: a cycle cut short later (a transient Slurm error)
            # must not lose when a job was first seen and submitted, which its action keys and its
            # wait for profiling room are counted from.
            self._save(records[jid] for jid in new_ids)
            changed = {}
        self._prev_read_at = now  # (not before its new jobs are saved: a cut-short cycle sees them again)
        # lucidd's SiteFactors of the jobs still waiting, per partition: to see whether Slurm started
        # a job ahead of others lucidd ranked higher (shadow mode's comparison; also kept live). A job
        # of `-p main,research` waits in both: it is overtaken by a start in either.
        waiting_factors = {}
        for jid, r in records.items():
            j = seen.get(jid)
            if j is not None and j.pending and r.site_factor is not None:
                for part in partition_names(r.target_partition):
                    waiting_factors.setdefault(part, []).append(r.site_factor)
        for jid, r in list(records.items()):
            j = seen.get(jid)
            if j is None or j.ended:
                self._close(r, j, now)
                changed[jid] = r
                self._forget(jid, records)
                continue
            if not self.dry_run:
                self._adopt(r, j, now, changed)
            if r.phase == "released":
                self._follow_owner_move(r, j, changed)
                self._flag_cannot_run(r, j, changed)
            if r.time_limit_s != j.time_limit_s:  # users and admins may change it while it waits
                r.time_limit_s = j.time_limit_s
                changed[jid] = r
            # not a COMPLETING (or signalled) job: a requeue that is still completing carries a start
            # time that is no new run's (an admin trial saw such a start in explain's story)
            ending = j.state in _ENDING_STATES and r.start_time is not None  # (first seen ending: its start)
            if j.start_time and r.start_time != j.start_time and j.active and not ending:
                if (not r.started_in_partition(self.profiling) and r.site_factor is not None
                        and j.partition in r.target_partition.split(",")):
                    r.started_ahead_of = sum(1 for v in waiting_factors.get(j.partition, ())
                                             if v > r.site_factor)
                if j.partition == self.profiling and r.profile_start is None:
                    r.profile_start = j.start_time
                r.start_time, r.partition_ran = j.start_time, j.partition
                changed[jid] = r
        if self.dry_run:
            seen = self._shadow_views(records, seen, now)
        # 3. requeue mechanics: released after the requeue, once safe
        releasing = []
        for jid, r in records.items():
            j = seen[jid]
            if j.partition != self.profiling:
                continue
            if _admitted_elsewhere(r) and j.restart_count > r.restarts:
                # requeued by whoever admitted it, who releases it too; it is released here only if
                # that does not come (the other scheduler stopped): a job is never left in profiling,
                # and a restart there is not requeued a second time
                if not (j.pending and now - (j.submit_time or now) > grace_s(self.cfg.daemon.interval_s)):
                    continue
            if r.profile == "requeued" or (j.pending and j.restart_count > r.restarts):
                if r.profile != "requeued":  # requeued, but lucidd died before recording it
                    r.profile, r.requeued_at = "requeued", j.submit_time  # Slurm resets submit to the requeue
                    changed[jid] = r
                if j.pending and j.restart_count > r.restarts and now >= (r.requeued_at or now) + 1:
                    if not self._backing_off(jid, now):
                        releasing.append(j)
                elif (j.state == "RUNNING" and j.restart_count > r.restarts and j.reason != "Prolog"
                      and j.start_time and now - j.start_time <= grace_s(self.cfg.daemon.interval_s)
                      and not self.dry_run and not self._controller_settling()):
                    # (only a restart seen within its first minute: one that began while lucidd was away
                    # has run on, and is left to finish, as other runs lucidd was away for)
                    if jid in self._unmovable or REFUSED_MOVE in (r.profile_reason or ""):
                        continue  # Slurm refused its release for good: it runs on in profiling (its reason says so)
                    self._requeue_restarted_run(j, r, now)
        # 4. decide
        inbox_jobs = [seen[jid] for jid, r in records.items()
                      if r.phase == "inbox" and seen[jid].pending and (seen[jid].partition == self.inbox or self.dry_run)]
        # A job whose partition Slurm does not list goes straight there (not profiled: if the move
        # fails, it must fail before a profiling run, not after one); a job whose move failed for
        # good (no such partition) waits in the inbox and is retried with a growing pause.
        direct, keep = [], []
        for j in inbox_jobs:
            r = records[j.job_id]
            if self._backing_off(j.job_id, now):
                continue
            missing = [p for p in r.target_partition.split(",") if p not in snap.partitions] if snap.partitions else []
            if r.profile in ("skipped", "released") and not self.dry_run:  # back in the inbox (_adopt)
                direct.append((j.job_id, (f"not profiled: back in {self.inbox} after a requeue "
                                          f"(restart {j.restart_count}), to {r.target_partition}")
                               if _requeued_since_release(r, j) else
                               f"back in {self.inbox}, to {r.target_partition} again"
                               + ("" if r.profile == "released" else " (not profiled)")))
            elif missing and not self.dry_run:
                direct.append((j.job_id, f"not profiled: Slurm lists no partition {','.join(missing)}"))
            elif (beyond := self._beyond_partition(j, r, snap)) is not None:
                # a profiling run would be wasted (the inbox spans every node, so Slurm accepted the job):
                # it goes there now, and is flagged when Slurm says it may never start (_flag_cannot_run)
                direct.append((j.job_id, f"not profiled: {beyond}"))
            elif whole := [f"{p} ({snap.partitions[p].whole_nodes})" for p in partition_names(r.target_partition)
                           if p in snap.partitions and snap.partitions[p].whole_nodes]:
                # its partition gives each job whole nodes; a profiling run gets what the job asked for,
                # on a node it may share: `srun -n 8` in a 1-CPU request failed there, and the job, ended
                # in profiling, never ran in its partition (a review on a test cluster, 2 December 2026)
                direct.append((j.job_id, f"not profiled: {', '.join(whole)} gives each job whole nodes, which a "
                                         f"run in {self.profiling} would not have"))
            else:
                keep.append(j)
        inbox_jobs = keep
        withdrawn = set()
        self._read_controller_settings(snap)
        preempts = self._profiling_preempts(snap)
        closed = self._profiling_closed(snap)
        if preempts or closed:
            # Slurm would start a profiling run by preempting a job it shares a node with, or starts none
            # there at all (an admin set the partition DOWN: jobs admitted there waited 2 x Tprof, told
            # "no node there had its GPUs free"; a review): nobody is profiled, and jobs admitted there
            # and not started go back
            why = (f"not profiled: a run in {self.profiling} would preempt running jobs of {', '.join(preempts)} "
                   f"(PreemptType=preempt/partition_prio; see lucidd's log or `lucidctl status`)" if preempts else
                   f"not profiled: {closed}")
            direct += [(j.job_id, why) for j in inbox_jobs]
            inbox_jobs = []
            for jid, r in records.items():
                j = seen[jid]
                if j.partition == self.profiling and j.pending and r.profile == "admitted" and r.profile_start is None:
                    direct.append((jid, why.replace("not profiled: ", "not profiled: admitted, not started; ", 1)))
                    withdrawn.add(jid)
        in_profiling = [seen[jid] for jid, r in records.items() if seen[jid].partition == self.profiling
                        and not seen[jid].ended and jid not in withdrawn]  # ended: a shadow's view
        waiting = [seen[jid] for jid in records if seen[jid].pending and self.is_managed(seen[jid].partition)]
        self._profiles_on = self._profiling_nodes(snap)
        prof_gpus = sum(n.gpus for n in snap.nodes.values() if n.name in self._profiles_on and n.usable)
        if prof_gpus > 0:
            self._prof_gpus_gone_at = None
        elif self._prof_gpus_gone_at is None:
            self._prof_gpus_gone_at = now
        queued = {}
        for j in waiting:
            if waits_for_other_than_gpus(j.reason):
                continue  # at its QOS limit, say: not in the way of a job that would start at once
            for part in partition_names(j.partition):  # `-p main,research` waits in each
                queued[part] = queued.get(part, 0) + 1
        free, node_gpus = {}, {}
        for n in snap.nodes.values():
            for part in n.partitions:
                node_gpus[part] = max(node_gpus.get(part, 0), n.gpus)
                if n.usable:
                    free[part] = max(free.get(part, 0), n.free_gpus)
        lend_gpus, lend_node, self._not_lendable, busy, node_wait = self._lendable(snap, waiting, records, now)
        # A shadow's virtual runs go on whether or not it was away: after its restart they are requeued
        # at Tprof, not left to finish (a run that never was cannot end, and would hold room for ever)
        asked = [j.job_id for j in in_profiling if j.requeue_warning]
        signalled = self.store.signals_sent(asked) if asked else {}
        packable = [j.job_id for j in waiting + releasing if j.packable]
        profiles = (self.store.profiling_gpu_profiles(packable, self.profiling,
                                                      since={jid: records[jid].first_seen for jid in packable
                                                             if jid in records}, now=now,
                                                      runs={j.job_id: j.restart_count for j in waiting + releasing})
                    if packable else {})
        # only where it is used: GPU packing that takes each partition's memory from the samplers
        k = getattr(self.cfg, "packing", None)
        by_samplers = k is not None and k.enabled and not k.gpu_memory_mib
        gpu_memory = self._partition_gpu_memory(snap) if packable and by_samplers else {}
        # the jobs this cycle sends on itself are ordered with the rest: each lands in its partition
        # with its SiteFactor already set (on a site where profiling would preempt, that is every job)
        sent_on = [seen[jid] for jid, _ in direct if jid in seen and self.is_managed(records[jid].target_partition)]
        inp = DecisionInput(now, inbox_jobs, in_profiling, waiting + releasing + sent_on, records, prof_gpus, queued,
                            free,
                            lend_gpus, lend_node, busy, node_wait_s=node_wait, away_s=0.0 if self.dry_run else away_s,
                            slurm_silent_s=None if self.dry_run else slurm_silent_s,
                            signalled=signalled, gpu_profiles=profiles, gpu_memory=gpu_memory, node_gpus=node_gpus,
                            over_time_limit_s=self._over_time_s,
                            profiling_gpus_gone_s=0.0 if self._prof_gpus_gone_at is None else now - self._prof_gpus_gone_at,
                            closed_partitions=self._closed_partitions(snap, node_gpus, free, now, records))
        plan = self.decider.decide(inp)
        plan.release.extend(direct)
        self._note_pinned_priorities(waiting, records, changed, now, plan.site_factors)
        # Jobs the decider releases from the inbox this cycle are ordered too (same plan).
        recorded = self.decider.record(inp, plan)
        n = self._apply(plan, snap, records, seen, releasing, changed, now)
        for jid, (est, src) in plan.estimates.items():
            r = records.get(jid)
            if r is not None and (r.estimate_s != est or r.estimate_source != src):
                r.estimate_s, r.estimate_source = est, src
                changed[jid] = r
        self._save(changed.values())
        # keep the inbox closed while lucidd runs (it may have been opened by lucidd-failopen)
        inbox = snap.partitions.get(self.inbox)
        # (DRAIN or INACTIVE too: job_submit.lua routes jobs only while the inbox is DOWN, so every new
        # job went straight to its partition, unprofiled and unordered, with nothing said: a review)
        if inbox is not None and (inbox.up or inbox.state not in ("", "DOWN")) and not self.dry_run:
            if not inbox.up:
                log.error("partition %s ([slurm] inbox_partition) is %s: job_submit.lua routes no job through "
                          "lucidd until it is DOWN; lucidd sets it DOWN", self.inbox, inbox.state)
            self._act(f"close-inbox:{now}", None, "close_inbox", {}, "lucidd is running: new jobs wait for it",
                      lambda: self.backend.set_partition_up(self.inbox, False), now, idempotent=False)
            n += 1
        elif inbox is None and not self.dry_run:
            log.error("partition %s ([slurm] inbox_partition) does not exist in Slurm: new jobs are not routed "
                      "through lucidd, or wait in another, DOWN partition (docs/deploy.md)", self.inbox)
        elif self.dry_run and self.warns_of_shadow_inbox and inbox is not None and not inbox.up:
            stuck = sum(1 for j in snap.jobs if j.partition == self.inbox and j.pending)
            if stuck and now >= self._warned_shadow_inbox + 600:
                # a shadow moves nothing: with the inbox DOWN, jobs routed there wait for nobody
                self._warned_shadow_inbox = now
                log.error("dry-run: partition %s is DOWN and %d job(s) wait there; a dry-run lucidd moves no job, "
                          "so they wait until it is UP (docs/deploy.md: run the shadow without JobSubmitPlugins=lua "
                          "or with the inbox UP; `lucidd-failopen --config ... --force` releases them)",
                          self.inbox, stuck)
        return n, recorded

    def _shadow_views(self, records: dict, seen: dict, now: int) -> dict:
        """A shadow's (--dry-run) virtual inbox and profiling runs: each job where the live daemon
        would have it. A shadow moves nothing, so every job stays in its own partition, where
        Slurm may start it. Seen as if it were in the inbox, a job lucidd has not yet let go waits
        for profiling room and is not ordered in its partition; seen as if it were in profiling,
        its run counts against the profiling capacity, is requeued at Tprof (counted from the cycle
        that would have admitted it: as if it had started at once) and released. Jobs lucidd has
        let go are returned as Slurm shows them."""
        views = dict(seen)
        for jid, r in records.items():
            j = seen.get(jid)
            if j is None or j.ended or j.partition == self.profiling:
                continue
            if r.phase == "inbox":
                # its reason kept: a --begin or held job is skipped as the live daemon skips it
                views[jid] = replace(j, partition=self.inbox, state="PENDING", start_time=None, node_names=())
            elif r.phase == "profiling" and r.profile in ("admitted", "abandoned"):
                # (a shadow's record from before virtual runs has no start: its first sight stands in)
                start = r.profile_start or r.first_seen or now
                if r.profile == "abandoned" and j.time_limit_s is not None and now >= start + j.time_limit_s:
                    # left to end at its own limit: live, Slurm would have ended it there, so it holds
                    # no profiling room past it (the real job may run on in its partition for hours)
                    views[jid] = replace(j, partition=self.profiling, state="TIMEOUT", reason="",
                                         start_time=start, end_time=start + j.time_limit_s, node_names=())
                    continue
                views[jid] = replace(j, partition=self.profiling, state="RUNNING", reason="",
                                     start_time=start, restart_count=r.restarts, node_names=())
            elif r.phase == "requeued" and r.profile == "requeued":
                views[jid] = replace(j, partition=self.profiling, state="PENDING", reason="BeginTime",
                                     start_time=None, submit_time=r.requeued_at or now,
                                     restart_count=r.restarts + 1, node_names=())
        return views

    @staticmethod
    def _beyond_partition(j: LiveJob, r: JobRow, snap) -> str | None:
        """Why the job's own partition can never start it, when that is plain from the request (more
        GPUs than any partition of its list has, a time limit above every one's MaxTime), else None.
        An admin trial saw such a job profiled first, then pend for ever with PartitionTimeLimit."""
        parts = [snap.partitions.get(p) for p in r.target_partition.split(",")]
        if not parts or any(p is None for p in parts):
            return None
        if all(p.total_gpus and j.gpus > p.total_gpus for p in parts):
            return f"asks for {j.gpus} GPUs, more than {r.target_partition} has ({max(p.total_gpus for p in parts)})"
        if j.time_limit_s is not None and all(p.max_time_s is not None and j.time_limit_s > p.max_time_s
                                              for p in parts):
            return (f"its time limit, {j.time_limit_s} s, is above {r.target_partition}'s MaxTime "
                    f"({max(p.max_time_s for p in parts)} s)")
        # Slurm checks these against the job's partition, and lucidd's two let everyone in: a profiling
        # run would give the job GPUs its partition's access lists deny it (seen on 22.05: moved to main,
        # the job pends for ever, AccountNotAllowed or QOSNotAllowed, as plain Slurm leaves it)
        said = [(p.name, p.refuses(j.account, j.qos)) for p in parts]
        if all(setting for _, setting in said):
            return "; ".join(f"{name} ({setting}) does not let in its "
                             + (f"account {j.account}" if "Accounts" in setting else f"QOS {j.qos}")
                             for name, setting in said)
        return None

    def _read_controller_settings(self, snap) -> None:
        """slurmctld's PreemptType and OverTimeLimit (one `scontrol show config`), read again every
        PREEMPT_TYPE_RECHECK_S and when a partition's PriorityTier or PreemptMode changes; a read that
        fails keeps the last values known (none yet: PreemptType not checked) and is tried again a
        minute later. Then the OverTimeLimit that applies in profiling: its partition's own, where it
        sets one, else the cluster's (DecisionInput.over_time_limit_s)."""
        from .slurm_settings import over_time_limit_s

        mono = self.monotonic()
        # `scontrol reconfigure` switches PreemptType at once (seen on 22.05), and the partitions'
        # PreemptMode show it at the same moment: OFF for every partition under preempt/none, the
        # cluster's mode under partition_prio. A change there is asked about at this cycle.
        view = tuple(sorted((n, p.priority_tier, p.preempt_mode) for n, p in snap.partitions.items()))
        if view != self._preempt_view:
            self._preempt_view, self._preempt_read = view, None
        if self._preempt_read is None or mono - self._preempt_read >= PREEMPT_TYPE_RECHECK_S:
            try:
                config = self.backend.controller_config()
                self._preempt_type = config.get("PreemptType", self._preempt_type)
                self._priority_type = config.get("PriorityType", self._priority_type)
                if "OverTimeLimit" in config:
                    self._over_time_cluster_s = over_time_limit_s(config["OverTimeLimit"])
                self._preempt_read = mono
            except BackendError as exc:
                log.warning("slurmctld's PreemptType not read this cycle (%s): %s", exc,
                            "not checked yet" if self._preempt_type is None else f"still {self._preempt_type}")
                self._preempt_read = mono - PREEMPT_TYPE_RECHECK_S + 60
        prof = snap.partitions.get(self.profiling)
        own = (prof.over_time or "").strip().upper() if prof is not None else ""
        self._over_time_s = self._over_time_cluster_s if own in ("", "NONE") else over_time_limit_s(own)
        self._priority_type_warning()

    def _priority_type_warning(self) -> None:
        """PriorityType as last read, judged again while lucidd runs: slurmctld restarted with
        priority/basic ignores every SiteFactor, and the check at lucidd's start had said nothing (a
        review on a test cluster: basic for minutes, jobs started in submission order, `lucidctl
        status` without a warning, lucidd still writing SiteFactors). Said in the log and in
        `lucidctl status` (slurm_warnings) when the finding changes, as the start's check says it."""
        from .slurm_settings import priority_type_warning

        if self._priority_type is None or self._priority_type == self._priority_judged:
            return  # (the database is read only when the setting changes, not every cycle)
        text = priority_type_warning(self._priority_type, self.cfg.ordering.enabled)
        stored = json.loads(self.store.get_meta("slurm_warnings") or "null")
        had = [w for w in stored or () if str(w).startswith("PriorityType=")]
        if had == ([text] if text else []):
            self._priority_judged = self._priority_type
            return
        lines = [w for w in stored or () if not str(w).startswith("PriorityType=")] + ([text] if text else [])
        self.store.set_meta("slurm_warnings", json.dumps(lines))
        # judged once written: a database error above leaves it to be judged again next time (a review)
        self._priority_judged = self._priority_type
        if text:
            log.error("slurm.conf: %s", text)
        else:
            log.warning("slurm.conf: PriorityType=%s: Slurm adds SiteFactor again, lucidd's order holds",
                        self._priority_type)

    def _note_pinned_priorities(self, waiting, records, changed, now, planned=None) -> None:
        """Pending jobs whose Slurm priority is below the SiteFactor lucidd set. Under multifactor every
        other factor only adds to SiteFactor (less the job's nice), so such a job was pinned by hand
        (`scontrol update jobid=N priority=P`: Slurm then ignores every SiteFactor, docs/deploy.md), or
        its SiteFactor was changed by hand. Before, lucidd said nothing: `lucidctl queue` and `explain`
        showed the job at its rank while Slurm kept it last (a review on the test cluster). Now lucidd
        writes the SiteFactor once more (which undoes a hand-set SiteFactor), and if the job stays below
        it, says so once in the log and in the job's order reason, until the job is back in the order
        (`scontrol hold N; scontrol release N` unpins it) or leaves the queue. Never a rewrite per cycle."""
        if self.dry_run or not self.cfg.ordering.enabled or \
                self._priority_type not in (None, "priority/multifactor"):
            return  # (a dry run sets no SiteFactor; under another PriorityType every job would look pinned)
        pending = set()
        slurm_slow = False  # a rewrite timed out this cycle: the others wait for the next (one timeout a cycle)
        for j in waiting:
            r = records.get(j.job_id)
            if r is None or not j.pending:
                continue
            pending.add(j.job_id)  # (held too: `scontrol hold; scontrol release` is how a pin is undone)
            # (priority 0: held, its own story; a SiteFactor below 2 lists as Slurm's floor of 1)
            if j.priority <= 0 or r.site_factor is None or r.site_factor < 2:
                continue
            if planned and j.job_id in planned and planned[j.job_id][0] != r.site_factor:
                # a new value goes out this cycle, or one whose answer was lost (a call that timed out
                # after Slurm took it: its priority is the new value, below the recorded one): judged
                # after (a review: a false "pinned" and the old value written back)
                continue
            below = j.priority < r.site_factor - max(j.nice, 0)
            if not below:
                noted = (r.order_reason or "").startswith(PINNED_NOTE)
                if j.job_id in self._pinned or noted:
                    before = self._pinned.pop(j.job_id, None)
                    before = before if isinstance(before, str) else None
                    if noted:  # (the reason it had; after a restart of lucidd, a plain word)
                        r.order_reason = before or f"back in lucidd's order (SiteFactor {r.site_factor})"
                        changed[j.job_id] = r
                    log.info("job %s: its priority %s is back in lucidd's order (SiteFactor %s)", j.job_id,
                             j.priority, r.site_factor)
                continue
            if self._pinned.get(j.job_id, _REWRITE) is _REWRITE:
                if j.job_id not in self._pinned:
                    log.warning("job %s: Slurm lists priority %s, below the SiteFactor %s lucidd set: pinned by "
                                "hand (`scontrol update priority=`) or its SiteFactor changed by hand; lucidd sets "
                                "the SiteFactor once more", j.job_id, j.priority, r.site_factor)
                self._pinned[j.job_id] = _REWRITE
                if slurm_slow:
                    continue
                value = r.site_factor
                try:
                    self._act(self._key("sitefactor-again", j.job_id, records, value, int(now)), j.job_id,
                              "sitefactor", {"value": value},
                              f"priority {j.priority} below lucidd's SiteFactor {value}: set again",
                              lambda jid=j.job_id, value=value: self.backend.set_site_factor([jid], value), now)
                except BackendError as exc:
                    # best effort: a timeout here must not cost the cycle its requeues and releases; the
                    # rewrite is tried again next cycle
                    if not exc.transient:
                        raise
                    slurm_slow = True
                    log.warning("job %s: SiteFactor not set again (%s): tried next cycle", j.job_id, exc)
                    continue
                self._pinned[j.job_id] = None  # set again: judged at the next cycle
            else:
                note = (f"{PINNED_NOTE} at priority {j.priority} (`scontrol update priority=`): Slurm ignores its "
                        f"SiteFactor {r.site_factor}, so lucidd's order does not apply to it; `scontrol hold "
                        f"{j.job_id}; scontrol release {j.job_id}` gives it back to the order")
                if self._pinned[j.job_id] is None:
                    log.warning("job %s: %s", j.job_id, note)
                    self._pinned[j.job_id] = ""  # said (after a restart of lucidd the reason it had is lost)
                if not (r.order_reason or "").startswith(PINNED_NOTE):  # (a new SiteFactor brought its own reason)
                    self._pinned[j.job_id] = r.order_reason
                if r.order_reason != note:
                    r.order_reason = note
                    changed[j.job_id] = r
        for jid in [jid for jid in self._pinned if jid not in pending]:
            del self._pinned[jid]  # started, ended, held, or no longer lucidd's to order

    def _profiling_preempts(self, snap) -> list:
        """The partitions whose running jobs Slurm would preempt to start a profiling run
        (slurm_settings.preempted_by_profiling), from this cycle's partitions and the PreemptType
        _read_controller_settings last read. Said in the log and in `lucidctl status` when the
        finding changes."""
        from .slurm_settings import PREEMPT_WARNING_PREFIX, preempted_by_profiling, preemption_warning

        found = preempted_by_profiling(self._preempt_type, snap.partitions, self.profiling)
        if found != self._preempts_said:
            text = preemption_warning(found, snap.partitions, self.profiling) if found else None
            stored = json.loads(self.store.get_meta("slurm_warnings") or "null")
            lines = [w for w in stored or () if not str(w).startswith(PREEMPT_WARNING_PREFIX)] + ([text] if text else [])
            if lines != (stored or []):
                self.store.set_meta("slurm_warnings", json.dumps(lines))
            if text:
                log.error("slurm.conf: %s", text)
            elif self._preempts_said:
                log.warning("slurm.conf: a run in %s no longer preempts any partition's jobs: profiling is on again",
                            self.profiling)
            self._preempts_said = found
        return found

    def _profiling_closed(self, snap) -> str | None:
        """Why Slurm starts no run in the profiling partition (DOWN, DRAIN or INACTIVE, or not listed),
        else None; said once in the log when it changes. A shadow (--dry-run) runs before the
        partition exists (_profiling_nodes) and moves nothing: not judged."""
        part = snap.partitions.get(self.profiling)
        if self.dry_run or not snap.partitions:
            why = None
        elif part is None:
            why = f"Slurm lists no partition {self.profiling} ([slurm] profiling_partition)"
        elif not part.up:
            why = f"partition {self.profiling} is {part.state or 'not UP'}"
        else:
            why = None
        if why != self._profiling_closed_said:
            if why:
                log.error("%s: lucidd profiles no job until it is UP; new jobs go straight to their partitions", why)
            elif self._profiling_closed_said:
                log.warning("partition %s is UP again: profiling is on again", self.profiling)
            self._profiling_closed_said = why
        return why

    def _partition_gpu_memory(self, snap) -> dict:
        """partition -> {GPU node: its smallest GPU's MiB as its sampler last said, or None}. The
        partitions' GPU nodes are kept in the database too (meta PARTITION_GPU_NODES_KEY, written
        when they change) so that `lucidctl explain` judges a job on the nodes lucidd did."""
        nodes = {}
        for name, n in sorted(snap.nodes.items()):
            if n.gpus > 0:
                for part in n.partitions:
                    nodes.setdefault(part, []).append(name)
        if nodes != self._partition_gpu_nodes:
            self.store.set_meta(PARTITION_GPU_NODES_KEY, json.dumps(nodes, sort_keys=True))
            self._partition_gpu_nodes = nodes
        return partition_gpu_memory(nodes, self.store.gpu_nodes())

    def _warn_of_nodes_outside_inbox(self, snap):
        """Nodes of the partitions lucidd orders that the inbox does not have (a node added to `main`
        only): job_submit.lua submits every routed job to the inbox, so Slurm checks it against the
        inbox's nodes, and a job only such a node can run was refused at submission ("Requested node
        configuration is not available"), where plain Slurm took it (a review). Said once per set."""
        if not snap.nodes or self.dry_run:
            return
        has_inbox = any(self.inbox in n.partitions for n in snap.nodes.values())
        outside = tuple(sorted(name for name, n in snap.nodes.items() if has_inbox and self.inbox not in n.partitions
                               and any(self.is_managed(p) for p in n.partitions if p != self.profiling)))
        if outside != self._nodes_outside_inbox:
            self._nodes_outside_inbox = outside
            if outside:
                log.warning("slurm.conf: node(s) %s are in partitions lucidd orders but not in the inbox (%s): "
                            "Slurm checks a routed job against the inbox's nodes at submission, so a job only "
                            "they can run is refused there. Add them to the inbox's (and %s's) Nodes= and "
                            "`scontrol reconfigure` (docs/deploy.md, \"Adding nodes\")",
                            ",".join(outside[:20]) + (" ..." if len(outside) > 20 else ""), self.inbox,
                            self.profiling)

    def _closed_partitions(self, snap, node_gpus: dict, free: dict, now: int, records=None) -> frozenset:
        """Partitions that have not been able to start a job for max(60 s, 3 intervals): not UP, or
        with nodes and none of them usable (`free` counts usable nodes only). Nodes that miss a cycle
        or two while they register again (NOT_RESPONDING) close nothing (DecisionInput.closed_partitions).
        A partition a record's job asked for that Slurm no longer lists (an admin removed or renamed
        it) is closed at once: a requeue there would leave the job nowhere to go, and Slurm would
        restart it in profiling (a review: requeued every 2 minutes for as long as it was gone)."""
        closed_now = (({x for x in node_gpus if x not in free}
                       | {x for x, part in (snap.partitions or {}).items() if not part.up})
                      - {self.inbox, self.profiling})
        self._closed_since = {x: self._closed_since.get(x, now) for x in closed_now}
        hold = grace_s(self.cfg.daemon.interval_s)
        gone = set()
        if snap.partitions and records:
            gone = {x for r in records.values() if r.phase == "profiling"
                    for x in partition_names(r.target_partition)} - set(snap.partitions)
        return frozenset({x for x, t in self._closed_since.items() if now - t >= hold} | gone)

    def _profiling_nodes(self, snap) -> frozenset:
        """The nodes of the profiling partition. A shadow (--dry-run) on a cluster that does not
        have the partition yet (docs/deploy.md's rollout runs the shadow before slurm.conf changes)
        takes it to span every node of the partitions it orders, as the shipped slurm.conf lines
        make it; without this its profiling capacity was 0 and it profiled nothing (an admin trial)."""
        nodes = frozenset(name for name, n in snap.nodes.items() if self.profiling in n.partitions)
        if nodes or not self.dry_run or not snap.nodes:
            return nodes
        if not self._warned_no_profiling:
            self._warned_no_profiling = True
            log.warning("dry-run: Slurm has no partition %s; the shadow takes it to span every node of the "
                        "partitions it orders, as docs/deploy.md's slurm.conf lines make it", self.profiling)
        return frozenset(name for name, n in snap.nodes.items()
                         if any(self.is_managed(p) for p in n.partitions if p not in (self.inbox, self.profiling)))

    def _lendable(self, snap, waiting, records, now) -> tuple[int, int, list, frozenset, dict]:
        """GPUs profiling may borrow ([profiler] lend_idle_gpus): the free GPUs on usable nodes of the
        profiling partition whose managed partitions nobody waits in, the most on one such node, the
        profiling partition's other nodes (a lent run's ExcNodeList), of those the ones where
        someone waits (a lent run there is reclaimed), and for each of these the longest wait there
        since submission (`DecisionInput.node_wait_s`). Held jobs and jobs waiting for other jobs or
        for a begin time wait for no GPU: they do not count."""
        if not getattr(self.cfg.profiler, "lend_idle_gpus", False):
            return 0, 0, [], frozenset(), {}
        wants = {}  # partition -> the longest wait of a job that wants GPUs there
        for j in waiting:
            # (a --begin job waits for the clock; one Slurm requeued itself waits 121 s in BeginTime
            # for its GPUs, and they are wanted)
            if not j.held and not j.dependency and not (j.waits_for_begin_time and j.restart_count == 0) \
                    and not waits_for_other_than_gpus(j.reason):
                r = records.get(j.job_id)
                waited = max(0, now - (r.original_submit if r is not None else j.submit_time))
                # `-p main,research`: the job wants GPUs in each (keyed by the whole list, no node's
                # partition matched it: a kept lent run was never reclaimed)
                for part in partition_names(j.partition):
                    wants[part] = max(wants.get(part, 0), waited)
        gpus = most = 0
        others, busy, node_wait = [], set(), {}
        for name, n in sorted(snap.nodes.items()):
            waits = [wants[p] for p in n.partitions if p in wants and self.is_managed(p)]
            waited_for = bool(waits)
            if waited_for:
                # on every node, not only the profiling partition's: a lent run goes on where Slurm put
                # it if an admin takes its node out of profiling, and must still be reclaimed there
                busy.add(name)
                node_wait[name] = max(waits)
            if name not in self._profiles_on:
                continue
            if not n.usable or n.asleep or waited_for:  # (asleep: a short run would wake a node)
                others.append(name)
                continue
            free = n.free_gpus
            gpus += free
            most = max(most, free)
        if not gpus:
            return 0, 0, [], frozenset(busy), node_wait
        # others empty: every node is lendable, no steering needed
        return gpus, most, others, frozenset(busy), node_wait

    def _adopt(self, r: JobRow, j: LiveJob, now: int, changed: dict):
        """Bring a record back in line with where Slurm has the job, when they disagree.

        * Recorded in the inbox but found in profiling or in its partition: lucidd moved it and did
          not record the move (killed between the scontrol call and the database write, a cycle cut
          short by a transient error after the move, or scontrol reporting an error for a change it
          made), or lucidd-failopen or its owner moved it. In profiling it is treated as admitted,
          so Tprof and the 2 x Tprof withdrawal apply.
        * Recorded as out of the inbox but pending in it again: it started there while the inbox
          was open (lucidd stopped, the database down, `lucidd-failopen`) and Slurm requeued it
          (node failure, preemption, `scontrol requeue`), or an admin moved it back (job_submit.lua
          refuses a user's move into the inbox). It goes to its partition again, not profiled
          again; a job admitted to profiling and moved before it started there goes unprofiled.
        * Recorded in profiling but found in its partition: `lucidd-failopen` (or lucidd while its
          database was down, or its owner) moved it out. It is released; if Slurm restarted it since
          the record, its requeue happened, and a requeue still recorded as planned or failed is
          marked applied (lucidd died between the call and its record, or the call reported an error
          for a change it made)."""
        if r.phase == "inbox" and j.partition == self.profiling:
            r.phase, r.profile, r.restarts = "profiling", "admitted", j.restart_count
            r.lent = bool(j.excluded_nodes)  # a user's own --exclude is never profiled: lucidd's steering
            r.profile_reason = "found in the profiling partition: its admission was not recorded"
            # lucidd writes each admission as planned before it sends it: none at all is not a crash
            # (every action of the id, not only those since first_seen: the clock may have stepped back
            # between the job's first sight and its admission; an earlier job of the id only hides one)
            if not any(a.kind == "profile" for a in self.store.actions_for(r.job_id)):
                self._leave_to_other_scheduler(r, now, f"it was in {self.inbox} at lucidd's last look")
                changed[r.job_id] = r
                return
        elif r.phase == "inbox" and j.partition != self.inbox and self.is_managed(j.partition):
            r.phase, r.profile, r.released_at = "released", "skipped", now
            r.profile_reason = (f"not profiled: found in {j.partition}, moved there without a record of it "
                                "(by lucidd-failopen, its owner, or lucidd just before it stopped)")
            refused = self._refused.pop(r.job_id, None)
            # a release lucidd sent that Slurm reported as failed (or that lucidd sent and died before
            # recording) was made all the same: the move is lucidd's, not someone else's, and its
            # action is applied, not failed (a review: `-n 80` on a 64-CPU partition blamed others)
            made = self.store.settle_unapplied(r.job_id, "release", now, f"made: the job was found in {j.partition}")
            if refused or made:
                r.profile_reason = (f"not profiled: released to {j.partition} by lucidd"
                                    + (f"; Slurm reported an error for the move but made it ({refused})" if refused
                                       else "; the release was made, its record was not (lucidd stopped between "
                                            "the two)"))
            if _cannot_run_there(j.reason) or refused:
                # Slurm 22.05 makes the move, then reports the job's limits check as an error: plain
                # Slurm would have refused this job at submission
                why = j.reason if _cannot_run_there(j.reason) else f"it reported: {refused}"
                r.profile_reason += _never_start_note(r.job_id, j.partition, why)
        elif r.phase == "released" and j.partition == self.inbox and j.pending:
            requeued = _requeued_since_release(r, j)
            r.phase, r.profile = "inbox", ("released" if r.profile == "released" else "skipped")
            r.profile_reason = ((f"not profiled: back in {self.inbox} after a requeue (restart {j.restart_count}; "
                                 f"it had started there while the inbox was open)") if requeued else
                                (f"back in {self.inbox}, moved there without a record of it (by an admin, or its "
                                 "owner where job_submit.lua allows it)"
                                 + ("" if r.profile == "released" else "; not profiled")))
        elif r.phase in ("profiling", "requeued") and j.partition == self.inbox and j.pending:
            # moved from profiling into the inbox before its run (or its restart) there: no branch of
            # the inbox's or profiling's would ever pick it up again (an audit)
            profiled = r.profile == "requeued" or j.restart_count > r.restarts
            r.phase, r.profile = "inbox", ("released" if profiled else "skipped")
            r.profile_reason = (f"back in {self.inbox}, moved there from {self.profiling} without a record of it "
                                "(by an admin, or its owner where job_submit.lua allows it)"
                                + ("; its profiling run had been requeued" if profiled else
                                   "; not profiled: it had not started there"))
        elif r.phase in ("profiling", "requeued") and j.partition and j.partition not in (self.inbox,
                                                                                          self.profiling):
            # any partition, managed or not: job_submit.lua routes every job through the inbox
            requeued = r.profile == "requeued" or j.restart_count > r.restarts
            r.phase, r.released_at = "released", now
            # a list still there is lucidd's (cleared by _apply); none: whoever moved it cleared it
            r.lent = r.lent and bool(j.excluded_nodes)
            # not requeued: it was still waiting to start in profiling (a running one stays there)
            r.profile = "released" if requeued else "skipped"
            r.profile_reason = (f"found in {j.partition}: moved out of profiling without a record of it (by "
                                "lucidd, lucidd-failopen or its owner)"
                                + ("; its profiling run had been requeued" if requeued else
                                   "; not profiled: it had not started there"))
            if requeued and j.restart_count > r.restarts:
                if self.store.settle_unapplied(r.job_id, "requeue", now, "made: Slurm restarted the job "
                                               "(found later)"):
                    r.profile_reason += " (the requeue lucidd had planned was made)"
            # a move from profiling that lucidd made but did not record (or that scontrol reported as failed)
            self.store.settle_unapplied(r.job_id, "release", now, f"made: the job was found in {j.partition}")
            refused = self._refused.pop(r.job_id, None)
            if refused and j.pending and not _cannot_run_there(j.reason):
                r.profile_reason += _never_start_note(r.job_id, j.partition, f"it reported: {refused}")
        else:
            return
        log.warning("job %s: %s", r.job_id, r.profile_reason)
        changed[r.job_id] = r

    def _follow_owner_move(self, r: JobRow, j: LiveJob, changed: dict):
        """A released job found in a partition it was not sent to: its owner (or an admin) moved it
        (`scontrol update jobid=N partition=P`). lucidd does not move it back; it ranks it, and
        reports it, where it now is."""
        if not j.partition or j.partition in (self.inbox, self.profiling):
            return
        now_in = self.target_partition(j.partition)  # lucidd's own partitions left out of a list
        if set(now_in.split(",")) <= set(r.target_partition.split(",")):
            return
        old, r.target_partition = r.target_partition, now_in
        where = ("lucidd orders it there" if self.is_managed(now_in) else
                 "a partition lucidd does not order ([slurm] managed_partitions)")
        note = f"; moved from {old} to {now_in} by its owner or an admin: {where}"
        # the may-never-start note was said of the partition it left; its SiteFactor stays (Slurm
        # keeps it on a move)
        r.profile_reason = _without_never_start(r.profile_reason or "") + note
        r.order_reason = RANK_PREFIX.sub("", r.order_reason or "")  # the rank was in the partition it left
        log.info("job %s%s", r.job_id, note)
        changed[r.job_id] = r

    def _flag_cannot_run(self, r: JobRow, j: LiveJob, changed: dict):
        """A job in its partition that Slurm says may never start there (it accepted the move, and
        the inbox over every node accepted the job, where its own partition would have refused it:
        more GPUs than its nodes have, more nodes than it has, a longer limit than its MaxTime) is
        flagged for `lucidctl status` and `queue`; the flag goes when the job starts."""
        text = r.profile_reason or ""
        flagged = _NEVER_START_NOTE in text
        where = j.partition not in ("", self.inbox, self.profiling)
        # (a list lucidd set for lent GPUs is not the job's to change: lucidd clears it, _apply)
        stuck = j.pending and _cannot_run_there(j.reason) and where and not (r.lent and j.excluded_nodes)
        # a dependency that can no longer be met (afterok on a job that failed): Slurm keeps the job
        # for ever, as plain Slurm does, but lucidd ranked it as if it were waiting for GPUs
        orphan = j.pending and j.reason == "DependencyNeverSatisfied" and where
        if (stuck or orphan) and not flagged:
            fix = ("dependency=<jobs that can still end as asked>` or scancel it" if orphan else
                   "partition=<one it fits>`, change the request, or scancel it")
            r.profile_reason = text + _never_start_note(r.job_id, j.partition, j.reason, fix)
            log.warning("job %s: %s", r.job_id, r.profile_reason)
            changed[r.job_id] = r
        elif flagged and j.active:  # it started after all (an admin changed the partition or the job)
            r.profile_reason = _without_never_start(text)
            changed[r.job_id] = r

    def _backing_off(self, job_id: int, now: int) -> bool:
        """True while a job whose move failed for good waits before lucidd tries it again."""
        until = self._unmovable.get(job_id, (0, 0))[0]
        return now < until

    def _unmovable_now(self, r: JobRow, error: str, now: int, changed: dict, requeued: bool = False):
        """A job's move to its partition failed for good (say no such partition: job_submit.lua sent
        it to the inbox before Slurm could refuse it). It waits in the inbox, retried after 1 min,
        doubling to 1 h, and the reason says what an admin or its owner can do. `requeued`: a job
        requeued from profiling whose release failed so (the partition was removed after its
        requeue): Slurm starts it again in profiling once its begin time passes, and that restart
        runs on there, not requeued again."""
        _until, delay = self._unmovable.get(r.job_id, (0, 0))
        delay = min(3600, max(60, 2 * delay))
        self._unmovable[r.job_id] = (now + delay, delay)
        where = (f"requeued from {self.profiling}, where Slurm starts it again and lucidd leaves that run to "
                 "finish" if requeued else f"waits in {self.inbox}")
        r.profile_reason = (f"{where}: {REFUSED_MOVE} to {r.target_partition} ({error}); "
                            f"retried in {delay} s. An admin can `scontrol update jobid={r.job_id} "
                            f"partition=<name>` (job_submit.lua refuses a user's move out of {self.inbox}); "
                            f"its owner can scancel it and submit it again")
        log.error("job %s: %s", r.job_id, r.profile_reason)
        changed[r.job_id] = r

    def _save(self, rows):
        try:
            self.store.save_jobs(list(rows))
        except Exception:
            self._records = None  # the database may not hold what the cache holds: reload next cycle
            raise

    def _open_records(self) -> dict:
        """Jobs not yet ended, kept in memory between cycles (lucidd is their only writer) and
        loaded from the database at start and after any database error."""
        if self._records is None:
            self._records = self.store.open_jobs()
        return self._records

    def _forget(self, job_id: int, records: dict):
        """Drop a closed record from this cycle's records and from what lucidd keeps of it between cycles."""
        del records[job_id]
        for kept in (self._records, self._unmovable, self._refused, self._held_back):
            kept.pop(job_id, None)

    def _close(self, r: JobRow, j: LiveJob | None, now: int):
        was, r.phase = r.phase, "done"
        r.end_time = (j.end_time if j is not None else None) or now
        r.final_state = j.state if j is not None else "GONE"
        # Slurm gives a job that ended while pending (scancel, or past its --deadline) a start time
        # equal to its end: it never ran (squeue may list no nodes for a job that ran and ended, so
        # the state is asked too)
        ended_pending = (j is not None and j.state in ("CANCELLED", "DEADLINE") and j.end_time is not None
                         and j.start_time is not None and j.start_time >= j.end_time)
        if j is not None and j.start_time and not ended_pending:
            r.start_time = r.start_time or j.start_time
            r.partition_ran = j.partition
        if r.profile == "admitted" and j is not None and j.partition == self.profiling:
            r.profile = "finished"
            r.profile_reason = (f"ended ({r.final_state}) inside the profiling partition, "
                                f"{(r.end_time - (r.profile_start or r.end_time))} s after it started there: "
                                "never reached its partition")
            log.info("job %s: finished in profiling (%s)", r.job_id, r.final_state)
        elif (r.profile == "requeued" and j is not None and j.partition == self.profiling
              and j.restart_count <= r.restarts and not self.dry_run):
            # The run ended between lucidd's last look and its requeue request: Slurm left the ended
            # job alone (`scontrol requeue Incomplete`), so it ended in profiling after all.
            r.profile = "finished"
            r.profile_reason = (f"ended ({r.final_state}) inside the profiling partition as lucidd requeued it, "
                                f"{(r.end_time - (r.profile_start or r.end_time))} s after it started there: Slurm "
                                "left the ended job alone (requeue Incomplete), so it did not run again and never "
                                "reached its partition")
            log.info("job %s: finished in profiling as it was requeued (%s)", r.job_id, r.final_state)
        elif self.dry_run and r.profile == "admitted" and was == "profiling" and j is not None:
            # It ran in its own partition and ended before its virtual run reached Tprof: it started
            # there no earlier than the virtual run, so it would have ended inside that run.
            r.profile = "finished"
            r.profile_reason = (f"dry-run: ended ({r.final_state}) {r.end_time - (r.profile_start or r.end_time)} s "
                                "into its virtual profiling run, before Tprof: live, it would never have reached "
                                "its partition")
            log.info("job %s: dry-run: would have finished in profiling (%s)", r.job_id, r.final_state)

    def _mend_gone(self, rows: list, known: dict):
        """Records closed as GONE (the job left squeue before a cycle saw it end: a MinJobAge shorter
        than lucidd's cycles; a review saw 7 of 7 short jobs so, their profiling runs included) are
        closed again from accounting: how and where each ended, as a cycle that saw it end would have.
        A row is the record's job when it ended after lucidd first saw it and before it closed it."""
        mended = []
        for row in rows:
            mine = known.get(row["job_id"])
            end = row.get("end_time")
            if (mine is None or mine.phase != "done" or mine.final_state != "GONE" or not end
                    or not (mine.first_seen or 0) <= end <= (mine.end_time or 0)):
                continue
            start = row.get("start_time")
            ran = bool(start) and not never_ran(start, end, row.get("nodes", "?"))
            if ran and row.get("partition") == self.profiling and mine.profile_start is None:
                mine.profile_start = start
            self._close(mine, LiveJob(row["job_id"], partition=row.get("partition") or "",
                                      state=row.get("state") or "GONE", start_time=start if ran else None,
                                      end_time=end), end)
            mended.append(mine)
        if mended:
            self._save(mended)
            log.info("%d job(s) closed as GONE got their end from accounting (sacct)", len(mended))

    # -- applying -------------------------------------------------------------------------------
    def _act(self, key, job_id, kind, args, reason, fn, now, idempotent=True) -> bool:
        """Record, apply, mark one action. Returns True when Slurm took the change (or dry-run)."""
        return bool(self._act_batch([(key, job_id, kind, args, reason)], lambda ids: fn(), now,
                                    idempotent=idempotent))

    def _act_batch(self, items, fn, now, idempotent=True, applied=None, errors=None) -> set:
        """Apply one change to several jobs with one Slurm call: items = [(key, job_id, kind, args,
        reason)], fn(job_ids). Written as planned first, then sent, then marked applied, so a restart
        sees what was under way. A key already applied is skipped. If the batch call fails for good
        (say one job ended meanwhile) each job is tried alone, so one bad job never blocks the rest.
        Returns the job ids Slurm took; `errors`, when given, gets job id -> message for each job
        Slurm refused for good."""
        if idempotent:
            done = applied if applied is not None else self.store.applied_keys([it[0] for it in items])
            items = [it for it in items if it[0] not in done]
        if not items:
            return set()
        if self.dry_run:
            self.store.record_actions(items, now, "dry-run")
            for key, jid, kind, _args, reason in items:
                log.info("dry-run: would %s%s: %s", kind, "" if jid is None else f" job {jid}", reason)
            return {it[1] for it in items}
        self.store.record_actions(items, now, "planned")
        ok = set()
        for chunk in (items[k:k + 500] for k in range(0, len(items), 500)):  # scontrol argv stays short
            try:
                fn([it[1] for it in chunk])
                good = chunk
            except BackendError as exc:
                if exc.transient:
                    self.store.record_actions(chunk, now, "failed", str(exc))
                    raise
                if _denied(exc):
                    self.store.record_actions(chunk, now, "failed", str(exc))
                    raise SlurmDeniesLucidd(
                        f"Slurm refuses lucidd's {chunk[0][2]} of job(s) {[it[1] for it in chunk][:5]} as user "
                        f"{_user()}: {exc}. Add that user to LUCIDD_USERS in job_submit.lua (beside slurm.conf) "
                        "and make it SlurmUser or a Slurm operator (docs/deploy.md, Install)") from None
                if len(chunk) == 1:
                    self.store.record_actions(chunk, now, "failed", str(exc))
                    log.warning("%s job %s failed: %s", chunk[0][2], chunk[0][1], exc)
                    if errors is not None:
                        errors[chunk[0][1]] = str(exc)
                    continue
                good = []
                for k, it in enumerate(chunk, 1):
                    if k % 50 == 0 and self.progress is not None:  # one call each: up to 500 of them
                        self.progress(self._changes_made + len(good))
                    try:
                        fn([it[1]])
                        good.append(it)
                    except BackendError as one:
                        if one.transient:
                            raise
                        self.store.record_actions([it], now, "failed", str(one))
                        log.warning("%s job %s failed: %s", it[2], it[1], one)
                        if errors is not None:
                            errors[it[1]] = str(one)
            # the time it was sent, not the cycle's: a database call that waited can lie between the
            # two, and explain showed a requeue before the end of a job it had rerun (an admin trial)
            self.store.record_actions(good, max(now, int(self.clock())), "applied")
            for key, jid, kind, _args, reason in good:
                log.info("%s%s: %s", kind, "" if jid is None else f" job {jid}", reason)
                ok.add(jid)
            self._changes_made += len(good)
            if self.progress is not None:
                self.progress(self._changes_made)
        return ok

    def _controller_settling(self) -> bool:
        """True while slurmctld has been up for less than CONTROLLER_SETTLE_S: a job whose run ended
        while it was down shows RUNNING until the node's completion message arrives (slurmstepd
        retries it every 15 s), and a requeue then runs the finished job again (an admin trial: 5 of
        5 jobs). Requeues wait; so they do when slurmctld cannot be asked. An unknown start time
        (no BOOT_TIME) holds nothing, said once. The start time is read once for the requeues of a
        cycle (again if it took over 2 s: the re-check right before each requeue)."""
        mono = self.monotonic()
        if self._boot_read is not None and mono - self._boot_read[0] < 2.0:
            boot = self._boot_read[1]  # read a moment ago (this cycle's requeues share one read)
        else:
            try:
                boot = self.backend.controller_boot_time()
            except BackendError as exc:
                log.warning("requeues held back this cycle: slurmctld's start time could not be read (%s)", exc)
                return True
            self._boot_read = (mono, boot)
        if boot is None:
            if not self._warned_no_boot:
                self._warned_no_boot = True
                log.warning("slurmctld's start time (scontrol show config: BOOT_TIME) is unknown: requeues are not "
                            "held after a slurmctld restart (docs/deploy.md)")
            return False
        if self.clock() - boot >= CONTROLLER_SETTLE_S:
            return False
        if self._settle_logged != boot:
            self._settle_logged = boot
            log.warning("requeues held back until slurmctld has been up %d s (it started %d s ago): a run that "
                        "ended while it was down shows RUNNING until its node's completion message arrives",
                        CONTROLLER_SETTLE_S, int(self.clock() - boot))
        return True

    def _signal(self, job_id, sig, batch_only):
        """A warning signal. Its failure is this job's alone (scancel exits 1 without a word for a job
        that ended meanwhile): recorded on the action, never a reason to cut the cycle short."""
        try:
            self.backend.signal(job_id, sig, batch_only)
        except BackendError as exc:
            raise BackendError(str(exc) or "scancel --signal failed", transient=False) from None

    def _requeue_restarted_run(self, j: LiveJob, r: JobRow, now: int):
        """A requeued job whose restart began in profiling before lucidd released it: its owner (or an
        admin) ran `scontrol update jobid=X starttime=now` during the requeue's wait, and it ran to its
        end there, ahead of every queue (a review on a test cluster). Requeued again, once per restart,
        while it has run only seconds; lucidd then releases it as after any requeue."""
        if self._act(self._key("requeue", j.job_id, {j.job_id: r}, "restarted", j.restart_count), j.job_id,
                     "requeue", {}, f"its restart {j.restart_count} began in {self.profiling}, not in "
                     f"{r.target_partition}: requeued again", lambda: self._requeue_if_still_running(j), now):
            log.warning("job %s: restart %d began in %s before lucidd released it (its begin time changed?): "
                        "requeued again", j.job_id, j.restart_count, self.profiling)

    def _requeue_if_still_running(self, j: LiveJob):
        """`scontrol requeue` of the run this cycle saw, if it is still running. Slurm requeues a job
        that has ended, too, and it then runs again from the start: the cycle's snapshot can be
        seconds old by now (a database call that waited: an admin trial reran 10 finished jobs)."""
        now_state = self.backend.job_states([j.job_id]).get(j.job_id)
        if now_state is None or now_state[0] != "RUNNING" or now_state[2] != j.restart_count:
            shown = "gone" if now_state is None else f"{now_state[0]}, restart {now_state[2]}"
            raise BackendError(f"no requeue: Slurm shows the job {shown} now, not the run this cycle saw "
                               "(it ended or changed after this cycle's look at Slurm)", transient=False)
        if self._controller_settling():  # slurmctld restarted since the cycle's look
            raise BackendError("no requeue yet: slurmctld has just started", transient=False)
        self.backend.requeue(j.job_id)

    def _apply(self, plan: Plan, snap, records, seen, releasing, changed, now) -> int:
        n = 0
        sf = plan.site_factors
        key = self._key
        keys = ([key("sitefactor", jid, records, v[0]) for jid, v in sf.items()
                 if jid in records and records[jid].site_factor != v[0]]
                + [key("requeue", jid, records) for jid, _ in plan.requeue]
                + [key("signal", jid, records, seen[jid].restart_count, at) for jid, _, _, at, _ in plan.signal
                   if jid in seen]
                + [key("release", j.job_id, records, "profiled") for j in releasing]
                + [key("profile", jid, records) for jid, _ in plan.profile]
                + [self._direct_key(jid, records, seen[jid]) for jid, _ in plan.release if jid in seen]
                + [key("unexclude", jid, records, seen[jid].restart_count)
                   for jid in self._steered_away(records, seen)])
        applied = self.store.applied_keys(keys)
        # Order first: a job lands in its partition with its SiteFactor already set. Jobs that share
        # a value share one call.
        by_value = {}
        for jid, (value, rank, reason) in sf.items():
            r = records.get(jid)
            j = seen.get(jid)
            if r is None or r.site_factor == value or j is None or not j.pending:
                continue  # rank and reason are kept as of the value's decision: no write per cycle
            by_value.setdefault(value, []).append((key("sitefactor", jid, records, value), jid, "sitefactor",
                                                   {"value": value}, reason))
        for value, items in by_value.items():
            for jid in self._act_batch(items, lambda ids, value=value: self.backend.set_site_factor(ids, value), now,
                                       applied=applied):
                r = records[jid]
                r.site_factor, r.queue_rank, r.order_reason = value, sf[jid][1], sf[jid][2]
                changed[jid] = r
                n += 1
        # Tprof reached: requeue (only a job still running its profiling run)
        settling = bool(plan.requeue) and not self.dry_run and self._controller_settling()
        # A requeue a lucidd killed during its call left planned: its scontrol may outlive it and reach
        # slurmctld after this one's requeue and release, killing the run in the job's partition (a
        # review, with a slow scontrol and kill -9: the job ran three times). Held until that call
        # would have timed out, and a margin; if it arrives meanwhile, the job is released as requeued.
        in_flight = self.store.planned_since([key("requeue", jid, records) for jid, _ in plan.requeue],
                                             now - self.cfg.slurm.command_timeout_s - 60) if plan.requeue else set()
        for jid, reason in plan.requeue:
            j, r = seen.get(jid), records.get(jid)
            if j is None or r is None or j.partition != self.profiling or j.state != "RUNNING" \
                    or j.restart_count != r.restarts or settling:
                continue
            if key("requeue", jid, records) in in_flight:
                if self._held_back.get(jid) != "in flight":
                    self._held_back[jid] = "in flight"
                    log.warning("job %s: requeue held back: an earlier lucidd's requeue of it was under way when it "
                                "stopped, and may still reach Slurm", jid)
                continue
            silent = [n for n in j.node_names if n in snap.nodes and _not_answering(snap.nodes[n])]
            if silent:
                # Slurm could not deliver the kill: the run would go on, maybe to its end, and the
                # requeue completes when the node answers again, so the job runs a second time (seen on
                # the test cluster, twice). Held back until the node answers; if it never does, Slurm
                # requeues the job itself (node failure) and lucidd releases it then.
                if self._held_back.get(jid) != tuple(silent):
                    self._held_back[jid] = tuple(silent)
                    log.warning("job %s: requeue held back: its node %s does not answer Slurm (%s); a requeue "
                                "now could not stop the run", jid, ",".join(silent),
                                ",".join(snap.nodes[n].state for n in silent))
                continue
            self._held_back.pop(jid, None)
            refused = {}
            if self._act_batch([(key("requeue", jid, records), jid, "requeue", {}, reason)],
                               lambda ids, j=j: self._requeue_if_still_running(j), now, applied=applied,
                               errors=refused):
                r.profile, r.phase = "requeued", "requeued"
                r.requeued_at = int(self.clock())  # the release waits until this second is over
                r.profile_reason = reason
                changed[jid] = r
                n += 1
            elif jid in refused and any(w in refused[jid].lower() for w in _REQUEUE_NEVER):
                # Slurm refuses for good (a --no-requeue job its owner moved into profiling, say):
                # asking again every cycle changes nothing; it finishes where it runs. Other refusals
                # (the job just ended, Slurm requeued it itself) are read from the next snapshot.
                r.profile = "abandoned"
                r.profile_reason = f"{reason}; Slurm refuses to requeue it ({refused[jid]}): it finishes in profiling"
                log.warning("job %s: %s", jid, r.profile_reason)
                changed[jid] = r
        # the warning a job asked for before its requeue (lucid:signal= in its comment), once per run
        for jid, sig, batch_only, at_tprof, reason in plan.signal:
            j = seen.get(jid)
            if j is None or j.state != "RUNNING" or jid not in records:
                continue
            # once per run and Tprof: a run kept to long_tprof_s is warned again before that
            if self._act_batch([(key("signal", jid, records, j.restart_count, at_tprof), jid, "signal",
                                 {"signal": sig, "batch": batch_only, "restart": j.restart_count,
                                  "tprof": at_tprof}, reason)],
                               lambda ids, sig=sig, b=batch_only: self._signal(ids[0], sig, b), now,
                               applied=applied):
                n += 1
        # GPU packing: a waiting job's shard count, where it differs (a count change in one call,
        # never a zero; not idempotent by key: a job is lowered and raised again as its queue changes)
        # A job requeued after profiling gets its count before it is moved to its partition (below): it
        # waits for its BeginTime in profiling, so Slurm cannot start it between the two calls.
        by_count = {}
        leaving = {j.job_id for j in releasing}
        for jid, (count, reason) in plan.shards.items():
            j = seen.get(jid)
            if j is None or jid not in records or not j.pending or not j.packable or j.shards == count \
                    or (jid not in leaving and not self.is_managed(j.partition)):
                continue
            tried = self._shards_tried.get(jid)
            if tried is not None and tried[:2] == (count, j.restart_count) and (
                    self.dry_run or now - tried[2] < SHARDS_RETRY_S):
                continue  # a shadow changes nothing, and a refused change waits: not one row per cycle
            by_count.setdefault(count, []).append((f"shards:{jid}:{j.restart_count}:{count}:{now}", jid, "shards",
                                                   {"count": count, "restart": j.restart_count}, reason))
        # A lowered job that an admin (or its owner) took out of what lucidd judges, to a partition
        # lucidd does not order or onto more nodes, gets its GPU back: nobody would raise it there, and
        # it would share a GPU unjudged (an audit), with packing on or off.
        for jid, j in seen.items():
            if (jid in records and jid not in plan.shards and lowered_elsewhere(j, self.is_managed, self.inbox,
                                                                                 self.profiling)
                    and not self.dry_run):
                tried = self._shards_tried.get(jid)
                if tried is not None and tried[:2] == (2, j.restart_count) and now - tried[2] < SHARDS_RETRY_S:
                    continue
                where = f"{j.nodes} nodes" if j.nodes > 1 else f"{j.partition}, a partition lucidd does not order"
                by_count.setdefault(2, []).append((f"shards:{jid}:{j.restart_count}:2:{now}", jid, "shards",
                                                   {"count": 2, "restart": j.restart_count},
                                                   f"a GPU of its own again: it waits on {where}, where lucidd "
                                                   "does not judge its sharing"))
        for count, items in sorted(by_count.items()):
            # a BackendError here (Slurm did not answer) fails the cycle: the next one asks again
            done = self._act_batch(items, lambda ids, c=count: self.backend.set_shards(ids, c), now,
                                   idempotent=False)
            n += len(done)
            for it in items:  # remembered where refused (or a shadow's): a change Slurm took may be wanted again
                if self.dry_run or it[1] not in done:
                    self._shards_tried[it[1]] = (count, seen[it[1]].restart_count, now)
        for jid in [k for k in self._shards_tried if k not in seen or not seen[k].pending]:
            del self._shards_tried[jid]
        for jid, reason in plan.abandon:
            r = records.get(jid)
            if r is not None and r.profile != "abandoned":
                r.profile, r.profile_reason = "abandoned", reason
                changed[jid] = r
                log.warning("job %s: %s", jid, reason)
        # after a requeue: to the partition, starting now (one job at a time: each has its own timing)
        for j in releasing:
            r = records[j.job_id]
            # how long it ran there: tprof_s, or long_tprof_s for a lent or long run
            ran = r.requeued_at - r.profile_start if r.requeued_at and r.profile_start else None
            # a hold on a running job changes nothing in plain Slurm until the job is requeued: after
            # lucidd's requeue it waits, held, in its partition (a review: explain said "runs in main")
            then = (f"held by its owner or an admin, it waits in {r.target_partition} until `scontrol release "
                    f"{j.job_id}`" if j.held else f"runs in {r.target_partition}")
            reason = (f"profiled for {ran} s and requeued" if ran is not None and ran >= 0 else
                      "profiled and requeued") + f"; {then}"
            # a borrowed run's ExcNodeList goes with it: its partition's nodes may be among those excluded
            clear = "" if j.excluded_nodes else None
            item = (key("release", j.job_id, records, "profiled"), j.job_id, "release",
                    {"partition": r.target_partition, "starttime": "now"} | ({"excnodelist": ""} if clear == "" else {}),
                    reason)
            errors = {}
            if self._act_batch([item], lambda ids, r=r, clear=clear: self.backend.move(ids, r.target_partition,
                                                                                          start_now=True, exclude=clear),
                               now, applied=applied, errors=errors):
                r.profile, r.phase, r.released_at = "released", "released", now
                if clear == "":
                    r.lent = False  # its list went with this move: any later one is its owner's
                self._unmovable.pop(j.job_id, None)
                changed[j.job_id] = r
                n += 1
            elif "invalid partition" in errors.get(j.job_id, "").lower():
                self._unmovable_now(r, errors[j.job_id], now, changed, requeued=True)
        # inbox -> profiling, one call for all; jobs on borrowed GPUs in a second call that also keeps
        # them off the nodes of partitions where someone waits (ExcNodeList)
        items, lent_items, reasons = [], [], {}
        lent = set(plan.lend)
        exclude = ",".join(getattr(self, "_not_lendable", []) or [])
        for jid, reason in plan.profile:
            j, r = seen.get(jid), records.get(jid)
            if j is None or r is None or (j.partition != self.inbox and not self.dry_run) or not j.pending:
                continue
            if jid in lent and exclude:
                lent_items.append((key("profile", jid, records), jid, "profile", {"partition": self.profiling,
                                                                                   "excnodelist": exclude}, reason))
            else:
                items.append((key("profile", jid, records), jid, "profile", {"partition": self.profiling}, reason))
            reasons[jid] = reason
        admitted = self._act_batch(items, lambda ids: self.backend.move(ids, self.profiling), now, applied=applied)
        admitted |= self._act_batch(lent_items, lambda ids: self.backend.move(ids, self.profiling, exclude=exclude),
                                    now, applied=applied)
        for jid in admitted:
            r = records[jid]
            r.profile, r.phase, r.profile_reason, r.restarts = "admitted", "profiling", reasons[jid], \
                seen[jid].restart_count
            r.lent = jid in lent
            if self.dry_run:  # a virtual run (_shadow_views), taken to start at once
                r.profile_start = now
                r.profile_reason += "; dry-run: a virtual run from this cycle, the job stays in its partition"
            changed[jid] = r
            n += 1
        # inbox -> partition (no profiling), one call per partition; also jobs admitted to profiling
        # that never started there (the decider withdraws them after 2 x Tprof)
        by_target, reasons = {}, {}
        for jid, reason in plan.release:
            j, r = seen.get(jid), records.get(jid)
            if j is None or r is None or not j.pending:
                continue
            from_profiling = j.partition == self.profiling and r.profile == "admitted" and r.profile_start is None
            if j.partition != self.inbox and not from_profiling and not self.dry_run:
                continue
            # a job withdrawn from borrowed GPUs (or moved back into the inbox from them) leaves its
            # ExcNodeList behind (one call per such job group)
            clear = (from_profiling or r.lent) and bool(j.excluded_nodes)
            split = self._het_components_sent_on(j, r, snap) if j.het_job_id == jid else False
            if split is None:
                continue  # a component's own move failed: the whole job waits in the inbox for the next cycle
            args = {"partition": r.target_partition} | ({"excnodelist": ""} if clear else {}) | \
                ({"het_leader_only": True} if split else {})
            by_target.setdefault((r.target_partition, clear, split), []).append(
                (self._direct_key(jid, records, j), jid, "release", args, reason))
            reasons[jid] = reason
        for (target, clear, split), items in by_target.items():
            errors = {}
            moved = self._act_batch(items, lambda ids, target=target, clear=clear, split=split: self.backend.move(
                ids, target, exclude="" if clear else None, het_leader_only=split), now, applied=applied,
                errors=errors)
            for jid in moved:
                r = records[jid]
                r.profile = "released" if r.profile == "released" else "skipped"  # profiled before: it stays so
                r.phase, r.profile_reason, r.released_at = "released", reasons[jid], now
                if clear:
                    r.lent = False
                self._unmovable.pop(jid, None)
                self._refused.pop(jid, None)
                changed[jid] = r
                n += 1
            for jid, error in errors.items():
                if seen[jid].partition == self.inbox and "invalid partition" in error.lower():
                    self._unmovable_now(records[jid], error, now, changed)
                elif "no longer pending" in error.lower():
                    # an array whose first tasks started (the inbox was open): its pending tasks moved,
                    # the running ones cannot; nothing was refused (the next cycle looks, _adopt)
                    pass
                else:  # Slurm may have made the move all the same: the next cycle looks (_adopt)
                    self._refused[jid] = error
        # A job steered onto lent GPUs (its ExcNodeList is lucidd's: a job with its owner's own
        # --exclude is never profiled) and moved out of profiling by an admin or its owner before it
        # started there keeps that list, which names the nodes of partitions someone waits in: its
        # own, as a rule, where it would then never start (an audit: BadConstraints on idle nodes).
        for jid in self._steered_away(records, seen):
            j, r = seen[jid], records[jid]
            item = (key("unexclude", jid, records, j.restart_count), jid, "release",
                    {"partition": j.partition, "excnodelist": ""},
                    f"the ExcNodeList lucidd set for a run on lent GPUs ({j.excluded_nodes}) cleared: the job was "
                    f"moved from {self.profiling} to {j.partition} before it started there")
            done = self._act_batch([item], lambda ids, part=j.partition: self.backend.move(ids, part, exclude=""),
                                   now, applied=applied)
            # tried once (a transient error raised above: tried again next cycle); refused for good, the
            # list stays, and the job is flagged if Slurm says it may never start (_flag_cannot_run)
            r.lent = False
            if done:
                r.profile_reason = (r.profile_reason or "") + "; the ExcNodeList lucidd had set for lent GPUs cleared"
                n += 1
            changed[jid] = r
        return n

    def _het_components_sent_on(self, leader: LiveJob, r: JobRow, snap) -> bool | None:
        """A heterogeneous job released from the inbox: its components that asked for a partition other
        than the leader's go there first, each by its own id (the leader, still in the DOWN inbox, keeps
        the job from starting meanwhile). True: some did, and the leader must then move alone (by its
        plain id Slurm moves every component with it: `sbatch -p main ... : -p research ...` ran all in
        main, seen on 22.05); False: all go where the leader goes, in one move; None: a move failed (the
        job stays in the inbox; the next cycle tries again)."""
        # every pending component, one already sent on at an earlier cycle too (whose leader's move
        # failed then): the leader must still move alone, or it would take that one back with it
        comps = [c for c in snap.jobs if c.het_job_id == leader.job_id and c.job_id != leader.job_id and c.pending]
        own = [(c, self.target_partition(c.requested_partition)) for c in comps]
        if not any(target != r.target_partition for _, target in own):
            return False
        for c, target in own:
            if c.partition == target:
                continue
            try:
                if not self.dry_run:
                    self.backend.move([c.job_id], target)
                log.info("job %s: component %s of heterogeneous job %s sent to %s, the partition it asked for",
                         leader.job_id, c.job_id, leader.job_id, target)
            except BackendError as exc:
                if exc.transient:
                    log.warning("job %s: could not send component %s of heterogeneous job %s to %s (%s): the "
                                "job waits in %s for the next cycle", leader.job_id, c.job_id, leader.job_id,
                                target, exc, self.inbox)
                    return None
                # refused for good (its partition gone, say): the whole job goes where its leader goes, as
                # Slurm would move it, rather than wait in the inbox for ever
                log.warning("job %s: Slurm refused component %s of heterogeneous job %s a move to %s (%s): the "
                            "job goes to %s whole", leader.job_id, c.job_id, leader.job_id, target, exc,
                            r.target_partition)
                return False
        return True

    def _steered_away(self, records: dict, seen: dict) -> list:
        """Jobs lucidd admitted to lent GPUs that wait in a partition with its ExcNodeList still set."""
        if self.dry_run:
            return []
        return [jid for jid, r in records.items()
                if r.lent and r.phase == "released" and jid in seen and seen[jid].pending
                and seen[jid].excluded_nodes and seen[jid].partition not in ("", self.inbox, self.profiling)]

    def _direct_key(self, jid: int, records: dict, j: LiveJob) -> str:
        """A release to the job's partition, once per incarnation and restart; a job back in the
        inbox after a release is released again (its earlier release's time tells the two apart: an
        admin's move back with no restart gave the same key, and the job was never sent on)."""
        r = records.get(jid)
        again = (f"after{r.released_at}",) if r is not None and r.released_at else ()
        return self._key("release", jid, records, "direct", j.restart_count, *again)

    @staticmethod
    def _key(kind: str, job_id: int, records: dict, *detail) -> str:
        """An action's idempotency key: what, which job, and which incarnation of that job id (when
        lucidd first saw it), so a job id Slurm hands out again (after lost state or at the MaxJobId
        wrap) is a new job, not one whose moves were already made."""
        r = records.get(job_id)
        seen_at = r.first_seen if r is not None else 0
        return ":".join(str(x) for x in (kind, job_id, *detail, f"s{seen_at}"))

    # -- history for the models ---------------------------------------------------------------------
    def read_history(self, now: int) -> int:
        """Finished jobs from accounting, with lucidd's own original submit times (Slurm resets them
        on requeue). Returns rows added; a missing slurmdbd is logged, never fatal.

        Reads from where the last read that worked ended (less an hour: slurmdbd may record a job
        late), so a failed read loses nothing. A backlog (the first start: `history_days` of it) is
        read a window at a time, one window per cycle, widened while windows come back small and
        narrowed when they come back large: two months of a large cluster's sacct in one call ran
        past the command's timeout (~6 KB of JSON a job), and its loss was never retried."""
        days = self.cfg.models.history_days * 86400
        if self.history_from is None:
            # from where the last read got to (saved: a window also brings jobs that ended long after
            # it, so the newest stored end can be weeks past it mid-backlog); else from the newest job
            # stored, not the whole window again (minutes to merge)
            saved = self.store.get_meta(HISTORY_CURSOR_KEY)
            self.history_from = max(now - days, int(float(saved)) if saved else self.store.history_fingerprint()[1])
        if self.history_from > now or self.last_history_read > now + HISTORY_OVERLAP_S:
            # The clock went back (it was ahead: a controller that booted before time sync). The last
            # read, dated ahead, would hold the next one off until the clock caught up with it, and
            # its cursor lies in the future: jobs that end meanwhile were never read (a review). Read
            # again from the newest job stored, at this cycle.
            newest = self.store.history_fingerprint()[1]
            back_to = min(self.history_from, newest or now, now)
            log.warning("the clock went back (the last read of finished jobs is dated %s): they are read again "
                        "from %s", time.strftime("%Y-%m-%d %H:%M", time.localtime(max(self.history_from,
                                                                                      self.last_history_read))),
                        time.strftime("%Y-%m-%d %H:%M", time.localtime(back_to)))
            self.history_from, self.last_history_read = back_to, 0
        self.history_from = max(self.history_from, now - days)
        # a backlog is read at every cycle, unless the last read failed (then at the usual pace)
        backlog = (now - self.history_from > self.cfg.daemon.history_interval_s + HISTORY_OVERLAP_S
                   and not self.history_failed)
        if not backlog and now - self.last_history_read < self.cfg.daemon.history_interval_s:
            return 0
        until = self.history_from + self.history_span
        if until >= now - HISTORY_OVERLAP_S:
            until = None  # up to now: the ordinary read
        self.last_history_read = now
        try:
            rows = self.backend.finished_jobs(self.history_from - HISTORY_OVERLAP_S, until)
        except BackendError as exc:
            self.history_failed = True
            if until is not None and self.history_span > HISTORY_MIN_SPAN_S:
                self.history_span = max(HISTORY_MIN_SPAN_S, self.history_span // 4)  # too big a window?
            log.warning("finished jobs not read (sacct): %s; the models keep their current data, the read is "
                        "tried again from %s", exc, time.strftime("%Y-%m-%d %H:%M", time.localtime(self.history_from)))
            return 0
        self.history_failed = False
        read_to = now if until is None else until
        if until is not None:
            if len(rows) < HISTORY_ROWS_WANTED // 4:
                self.history_span = min(days, self.history_span * 4)
            elif len(rows) > HISTORY_ROWS_WANTED * 2:
                self.history_span = max(HISTORY_MIN_SPAN_S, self.history_span // 2)
            log.info("history: %d finished job(s) read up to %s (backlog)", len(rows),
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(until)))
        known = self.store.jobs([r["job_id"] for r in rows])
        self._mend_gone(rows, known)
        out = []
        for r in rows:
            if not r.get("end_time") or never_ran(r.get("start_time"), r["end_time"], r.get("nodes", "?")):
                continue  # a 0 s record of a run that never happened would teach the models 0 s jobs
            mine = known.get(r["job_id"])
            submit = mine.original_submit if mine is not None else r["submit_time"] or r["start_time"]
            part = (mine.target_partition if mine is not None else r["partition"]) or r["partition"]
            if part in (self.inbox, self.profiling):
                part = self.default_partition
            out.append({"job_id": r["job_id"], "name": r["name"], "user": r["user"], "partition": part,
                        "gpus": r["gpus"], "submit_time": submit, "start_time": r["start_time"],
                        "end_time": r["end_time"], "duration": max(0, r["end_time"] - r["start_time"]),
                        "state": r["state"]})
        if out:
            self.store.add_history(out)
            self.store.prune_history(now - self.cfg.models.history_days * 86400)
        # the cursor moves once the rows are stored (a database error above re-reads the window)
        self.history_from = read_to
        self.store.set_meta(HISTORY_CURSOR_KEY, str(read_to))
        return len(out)

    def record_released(self, released: list, now: int, why: str) -> int:
        """Write down the moves of lucidd's own orderly stop (open_inbox's `released`), so that the
        next start finds each job where its record says, instead of warning that it was moved
        "without a record" (an admin trial). Returns the rows written."""
        rows = self.store.jobs([jid for jid, _target, _what in released])
        changed = []
        for jid, target, what in released:
            r = rows.get(jid)
            if r is None or r.phase in ("released", "done"):
                continue
            r.phase, r.released_at = "released", now
            r.lent = False  # open_inbox's moves clear a lent run's ExcNodeList
            if what == "requeued":
                r.profile = "released"
                r.profile_reason = (r.profile_reason or "") + f"; released to {target} by lucidd's stop ({why})"
            else:
                r.profile = "skipped"
                r.profile_reason = (f"not profiled: released to {target} by lucidd's stop ({why})"
                                    + (" after its admission, before it started there" if what == "admitted" else ""))
            changed.append(r)
        if changed:
            self.store.save_jobs(changed)
        return len(changed)


# ----- fail-open ------------------------------------------------------------------------------

def open_inbox(backend: Backend, config, reason: str, clock=time.time, released: list | None = None,
               inbox_must_exist: bool = False) -> list[str]:
    """Give every job lucidd holds back to Slurm's own scheduling, then open the inbox.

    Needs nothing but Slurm (no database, no lucidd process): pending inbox jobs go to the
    partition they asked for (job_submit.lua recorded it), requeued profiling jobs are released
    once their requeue is a whole second old, and the inbox is set UP so that jobs submitted while
    lucidd is away start too. Returns the lines it logged; `released`, when given, gets (job id,
    partition, "inbox" | "requeued" | "admitted") for each job Slurm took the move of. With
    `inbox_must_exist` (lucidd-failopen), an inbox Slurm does not have is a ConfigError once the
    jobs are released.
    """
    released = [] if released is None else released
    s = config.slurm
    lines = []
    try:
        snap = backend.snapshot()
    except BackendError:
        # Without the job list nothing can be released one by one; an open inbox still lets Slurm run
        # what waits there (a requeued profiling run restarts in profiling by itself). When slurmctld
        # does not answer at all this fails too, and the caller reports the first error.
        try:
            backend.set_partition_up(s.inbox_partition, True)
            log.warning("fail-open: partition %s set UP without reading the jobs (Slurm's job list could not be "
                        "read): %s", s.inbox_partition, reason)
        except BackendError:
            pass
        raise
    _raise_shared(backend, snap, lines)
    # heterogeneous jobs' components first, each to the partition it asked for, then their leaders
    # alone (`jobid=L+0`): by its plain id a leader takes every component to its own partition (seen
    # on 22.05), and one moved first, the components' moves would be undone
    waiting = [j for j in snap.jobs if j.partition == s.inbox_partition and j.pending]
    # (a component pending anywhere: lucidd may have sent it on and died before its leader's move)
    split = {j.het_job_id for j in snap.jobs if j.het_component and j.pending} & {j.job_id for j in waiting}
    by_target = {}
    for j in waiting:
        kind = 0 if j.het_component else 2 if j.job_id in split else 1
        by_target.setdefault((kind, released_to(j.requested_partition, s)), []).append(j.job_id)
    for (kind, target), ids in sorted(by_target.items()):
        try:
            backend.move(ids, target, het_leader_only=kind == 2)
            lines.append(f"released {len(ids)} job(s) from {s.inbox_partition} to {target}: {reason}")
            released.extend((jid, target, "inbox") for jid in ids)
        except BackendError as exc:
            lines.append(f"could not release job(s) {ids[:10]} to {target}: {exc}; the open inbox runs them")
    # The inbox is opened now, before the profiling partition's jobs are seen to: each of those is a
    # call of its own, and a slurmctld slow enough (often why lucidd died) could see systemd kill this
    # run before it reached the end, the inbox still DOWN, at every run of the timer
    inbox = snap.partitions.get(s.inbox_partition)
    not_opened = None
    if inbox is not None and not inbox.up:
        try:
            backend.set_partition_up(s.inbox_partition, True)
            lines.append(f"partition {s.inbox_partition} set UP: Slurm schedules new jobs without lucidd ({reason})")
        except BackendError as exc:
            not_opened = exc  # raised once the profiling partition's jobs are seen to
    prof = s.profiling_partition
    # A requeued profiling job: pending again with BeginTime; Slurm would restart it in profiling
    # ~2 min later anyway, in its own partition is better. One whose requeue is still completing (a
    # stop in the cycle that sent it) is PENDING within a moment: waited for, or it was left in
    # profiling, where it would start ahead of every queue with nobody to requeue it (an admin trial).
    requeued = [j for j in snap.jobs if j.partition == prof and j.pending and j.restart_count > 0]
    completing = {j.job_id for j in snap.jobs if j.partition == prof and j.state in _ENDING_STATES
                  and j.restart_count > 0}
    deadline = time.monotonic() + REQUEUE_COMPLETING_WAIT_S
    while completing and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            again = backend.snapshot().jobs
        except BackendError:
            break
        requeued += [j for j in again if j.job_id in completing and j.partition == prof and j.pending]
        completing = {j.job_id for j in again if j.job_id in completing and j.partition == prof
                      and j.state in _ENDING_STATES}
    if completing:
        lines.append(f"requeued job(s) {sorted(completing)[:10]} still completing their requeue after "
                     f"{REQUEUE_COMPLETING_WAIT_S} s: left in {prof}, where Slurm restarts them")
    # the same-second trap (Slurm kills a job restarted within its requeue's second): one wait for all
    # (at most 2 s: a submit time ahead of this clock, a step back or slurmctld's host running ahead,
    # made it sleep as long as the step, and systemd killed lucidd-failopen before it opened the inbox)
    latest = max((j.submit_time or 0 for j in requeued), default=0)
    if clock() < latest + 1:
        time.sleep(min(2.0, latest + 1.1 - clock()))
    for j in requeued:
        target = released_to(j.requested_partition, s)
        try:
            # a borrowed run's ExcNodeList (lucidd's: jobs with a user's own are never profiled) is
            # cleared, or its partition's nodes could stay excluded
            backend.move([j.job_id], target, start_now=True, exclude="" if j.excluded_nodes else None)
            lines.append(f"released requeued job {j.job_id} from {prof} to {target}")
            released.append((j.job_id, target, "requeued"))
        except BackendError as exc:
            lines.append(f"requeued job {j.job_id} left in {prof} ({exc}); Slurm restarts it there")
    for j in snap.jobs:
        if j.partition == prof and j.pending and j.restart_count == 0:
            # admitted, not started: left there it would start ahead of every queue (profiling's
            # PriorityTier) and run to its end with nobody to requeue it (an admin trial); it waits
            # in its own partition as it would without lucidd (a borrowed run's ExcNodeList cleared)
            target = released_to(j.requested_partition, s)
            try:
                backend.move([j.job_id], target, exclude="" if j.excluded_nodes else None)
                lines.append(f"released job {j.job_id}, admitted to {prof} and not started, to {target}")
                released.append((j.job_id, target, "admitted"))
            except BackendError as exc:
                lines.append(f"job {j.job_id} left in {prof} ({exc}); it runs there to its end")
    try:
        if inbox is None and inbox_must_exist:
            raise ConfigError(f"[slurm] inbox_partition = \"{s.inbox_partition}\": Slurm has no such partition: "
                              "nothing to open")
        if not_opened is not None:
            raise not_opened
    finally:
        for line in lines:
            log.warning("fail-open: %s", line)
    return lines


def _admitted_elsewhere(r: JobRow) -> bool:
    """A run in profiling that another scheduler admitted (Reconciler._leave_to_other_scheduler)."""
    return r.profile == "abandoned" and (r.profile_reason or "").startswith(ADMITTED_ELSEWHERE)


def _requeued_since_release(r: JobRow, j: LiveJob) -> bool:
    """Whether Slurm restarted the job since lucidd released it: its restart count is past the one
    it was admitted with, plus the one requeue of its profiling run if it had one."""
    return j.restart_count > r.restarts + (1 if r.profile == "released" else 0)


def lowered_elsewhere(j: LiveJob, is_managed, inbox: str, profiling: str) -> bool:
    """A waiting job lucidd lowered to one shard that now waits where lucidd does not judge it: in a
    partition it does not order, or on more than one node."""
    return (j.lowered and j.partition not in ("", inbox, profiling)
            and (j.nodes > 1 or not is_managed(j.partition)))


def _raise_shared(backend: Backend, snap, lines: list) -> None:
    """GPU packing at fail-open: a waiting job lucidd lowered to one shard would go on sharing GPUs
    with nobody to judge whether free GPUs are wanted; raised back, it waits for a GPU of its own,
    as a 1-GPU job does without lucidd. Before any job is released (a requeued job lowered before
    its move must not start sharing on its way), and never a reason to keep the inbox shut: a
    refused call is tried job by job (one that started meanwhile refuses), then left."""
    shared = [j.job_id for j in snap.jobs if j.lowered]
    if not shared:
        return
    raised, left = [], []
    try:
        backend.set_shards(shared, 2)
        raised = shared
    except (BackendError, NotImplementedError):
        for jid in shared:
            try:
                backend.set_shards([jid], 2)
                raised.append(jid)
            except (BackendError, NotImplementedError) as exc:
                left.append(f"{jid} ({exc})")
    if raised:
        lines.append(f"{len(raised)} waiting job(s) of one shard given a GPU of their own again (GPU packing): "
                     f"{raised[:10]}")
    if left:
        lines.append(f"waiting job(s) of one shard left to share GPUs: {', '.join(left[:10])}")


def heartbeat_age(path: str, now: float | None = None) -> float | None:
    try:
        return (now if now is not None else time.time()) - os.stat(path).st_mtime
    except OSError:  # missing or unreadable: no proof that lucidd is alive
        return None


def touch_heartbeat(path: str, at: float | None = None):
    """Make the heartbeat file and set its time (`at`; None: now)."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "a"):
        pass
    os.utime(path, None if at is None else (at, at))
