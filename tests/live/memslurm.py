"""An in-memory cluster behind lucidd's Backend interface, for driving the reconcile loop in unit
tests: jobs are LiveJob objects a test edits (start, end, requeue them as Slurm would), and every
change lucidd asks for is logged in `calls`. It models only what the loop reads and writes; the
real-Slurm tier (tests/slurm/) checks the real mechanics."""

from __future__ import annotations

from dataclasses import replace

from lucidd.backends.base import Backend, BackendError, ClusterSnapshot, LiveJob, NodeGPUs, Partition

T0 = 1_790_000_000


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class MemSlurm(Backend):
    name = "memory"

    def __init__(self, clock: Clock, nodes: int = 2, gpus_per_node: int = 8,
                 partitions=("inbox", "profiling", "main")):
        self.clock = clock
        self.jobs: dict[int, LiveJob] = {}
        self.inbox_up = False
        self.partitions = list(partitions)
        self.nodes = {f"gpu{i}": NodeGPUs(f"gpu{i}", gpus_per_node, 0, "IDLE", tuple(partitions))
                      for i in range(1, nodes + 1)}
        self.calls: list[tuple] = []
        # (verb, job_id) -> (message, transient, applied): the next such call fails this way; with
        # `applied` Slurm makes the change and still reports the error (scontrol's rc 1 after a change)
        self.fail: dict[tuple, tuple] = {}
        self.boot_time = None  # slurmctld's start time, when a test sets one
        # called with the job id when lucidd asks for a job's state right before a requeue: a test
        # ends the job there to play a run that ended after the cycle's snapshot
        self.before_requeue_check = None
        self.signals = []  # (job_id, signal, batch_only) sent
        self.config = {}  # what `scontrol show config` would print ({}: this backend cannot tell)
        self.config_reads = 0
        self.config_fails = None  # a BackendError controller_config() raises, when a test sets one
        self.tiers = {}  # partition -> PriorityTier (not set: not said)
        self.preempt_modes = {}  # partition -> PreemptMode as scontrol prints it
        self.whole_nodes = {}  # partition -> "OverSubscribe=EXCLUSIVE" / "ExclusiveUser=YES" where set
        self.over_times = {}  # partition -> its own OverTimeLimit as scontrol prints it ("NONE": the cluster's)
        self.states = {}  # partition -> a State other than UP an admin set (the inbox: other than lucidd's)
        self.site_factors = {}  # job_id -> the SiteFactor last set: its priority, as under multifactor
        self.pinned = {}  # job_id -> a priority set by hand (`scontrol update priority=`): SiteFactor ignored

    # -- what a test does to the cluster ----------------------------------------------------------
    def submit(self, job_id: int, partition="main", gpus=1, **kw) -> LiveJob:
        """A job as job_submit.lua leaves it: in the inbox, the asked-for partition in AdminComment."""
        j = LiveJob(job_id, partition="inbox", gpus=gpus, submit_time=int(self.clock()),
                    admin_comment=f"lucid:partition={partition}", **kw)
        self.jobs[job_id] = j
        return j

    def start(self, job_id: int):
        j = self.jobs[job_id]
        j.state, j.start_time = "RUNNING", int(self.clock())

    def end(self, job_id: int, state="COMPLETED"):
        j = self.jobs[job_id]
        j.state, j.end_time = state, int(self.clock())

    def slurm_requeue(self, job_id: int):
        """Slurm's own requeue (node failure, preemption): pending again where it was."""
        j = self.jobs[job_id]
        j.state, j.restart_count, j.submit_time, j.start_time = "PENDING", j.restart_count + 1, int(self.clock()), None

    def job_calls(self, job_id: int) -> list[tuple]:
        return [c for c in self.calls if job_id in c[1]]

    # -- Backend ------------------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        total = sum(n.gpus for n in self.nodes.values())
        # (`states`: a partition's State as an admin set it, DOWN, DRAIN, INACTIVE: not UP)
        parts = {p: Partition(p, (self.inbox_up if p == "inbox" else True) and p not in self.states,
                              tuple(self.nodes), total,
                              priority_tier=self.tiers.get(p), preempt_mode=self.preempt_modes.get(p, ""),
                              whole_nodes=self.whole_nodes.get(p, ""), over_time=self.over_times.get(p, ""),
                              state=self.states.get(p, ""))
                 for p in self.partitions}
        return ClusterSnapshot(int(self.clock()), [self._as_listed(j) for j in self.jobs.values()], parts,
                               dict(self.nodes))

    def _as_listed(self, j: LiveJob) -> LiveJob:
        # priority as Slurm's multifactor lists it (all other weights 0): the SiteFactor less the
        # job's nice, floored at 1; a priority pinned by hand instead; a held job's 0 as it is
        out = replace(j)
        if out.priority != 0 and j.job_id in self.pinned:
            out.priority = self.pinned[j.job_id]
        elif out.priority != 0 and j.job_id in self.site_factors:
            out.priority = max(1, self.site_factors[j.job_id] - max(j.nice, 0))
        return out

    def _call(self, verb: str, job_ids, apply):
        self.calls.append((verb, tuple(job_ids)))
        for jid in job_ids:
            failure = self.fail.pop((verb, jid), None)
            if failure:
                message, transient, applied = failure
                if applied:
                    apply(jid)
                raise BackendError(message, transient=transient)
        for jid in job_ids:
            apply(jid)

    def move(self, job_ids, partition: str, start_now: bool = False, exclude: str | None = None,
             het_leader_only: bool = False) -> None:
        def apply(jid):
            j = self.jobs[jid]
            # as Slurm 22.05: a heterogeneous job's leader by its plain id takes every component along
            comps = [] if het_leader_only or j.het_job_id != jid else \
                [c for c in self.jobs.values() if c.het_job_id == jid and c.job_id != jid]
            for x in (j, *comps):
                x.partition = partition
                if exclude is not None:
                    x.excluded_nodes = exclude

        if any(p not in self.partitions for p in partition.split(",")):
            self.calls.append(("move", tuple(job_ids)))
            raise BackendError(f"scontrol update jobid=...: Invalid partition name specified ({partition})",
                               transient=False)
        self._call("move", job_ids, apply)

    def job_states(self, job_ids) -> dict:
        out = {}
        for jid in job_ids:
            if self.before_requeue_check is not None:
                self.before_requeue_check(jid)
            j = self.jobs.get(int(jid))
            if j is not None:
                out[j.job_id] = (j.state, j.start_time, j.restart_count)
        return out

    def controller_boot_time(self):
        return self.boot_time

    def controller_config(self) -> dict:
        self.config_reads += 1
        if self.config_fails is not None:
            raise self.config_fails
        return dict(self.config)

    def requeue(self, job_id: int) -> None:
        def incomplete(jid):  # `scontrol requeue Incomplete`: a job that has ended is left alone
            if self.jobs[jid].state in ("RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED"):
                self.slurm_requeue(jid)

        self._call("requeue", [job_id], incomplete)

    def signal(self, job_id: int, signal: str, batch_only: bool) -> None:
        self._call("signal", [job_id], lambda jid: self.signals.append((jid, signal, batch_only)))

    def set_site_factor(self, job_ids, value: int) -> None:
        self._call("sitefactor", job_ids, lambda jid: self.site_factors.__setitem__(jid, value))

    def set_shards(self, job_ids, count: int) -> None:
        def lower(jid):
            self.jobs[jid].shards = count

        self._call("shards", job_ids, lower)

    def set_partition_up(self, name: str, up: bool) -> None:
        self.calls.append(("partition", (), name, up))
        self.states.pop(name, None)
        if name == "inbox":
            self.inbox_up = up

    def finished_jobs(self, since: int, until: int | None = None) -> list[dict]:
        return []
