"""The plain job object that policies see, in simulation and on a live cluster alike."""

from __future__ import annotations

import math

PENDING = "pending"
RUNNING = "running"
DONE = "done"


class Job:
    """One GPU job: what was known at submission, plus its scheduling state.

    Policies read these fields; only the backend (simulator or Slurm adapter) writes the state
    fields. `seq` is the submission order (ties at the same second keep trace order), which
    every ordering uses as its final tie-breaker so results never depend on hash or sort luck.
    """

    __slots__ = (
        # known at submission
        "job_id", "vc", "gpu_num", "submit_time", "duration", "seq", "user", "name", "cpu_num",
        "state", "profile", "time_limit",
        # model outputs attached before/while scheduling
        "estimate", "share_score", "attrs",
        # scheduling state (owned by the backend)
        "status", "start_time", "end_time", "queue", "remain", "attained", "rate", "progress_at",
        "preemptions", "last_stop", "alloc", "partner", "version", "shared_s", "was_shared",
    )

    def __init__(self, job_id, vc, gpu_num, submit_time, duration, seq, user="", name="", cpu_num=0,
                 state="", profile=None, time_limit=None):
        self.job_id = job_id
        self.vc = vc
        self.gpu_num = int(gpu_num)
        self.submit_time = int(submit_time)
        self.duration = int(duration)
        self.seq = int(seq)
        self.user = user
        self.name = name
        self.cpu_num = int(cpu_num)
        self.state = state
        self.profile = profile  # dict of workload metrics (gpu_util, gmem_util, gmem, amp, model...) or None
        # the user's own Slurm time limit in seconds (a live job's, or a trace's time_limit column);
        # None when none is known. Never a modelled one: those stand in for users' limits only in
        # the `slurm` engine's backfill, and are not information a scheduler may use.
        self.time_limit = time_limit
        self.estimate = None  # predicted duration in seconds, set by an estimator
        self.share_score = None  # 0 Tiny / 1 Medium / 2 Jumbo, set by the packing model
        self.attrs = {}
        self.reset()

    def reset(self):
        self.status = PENDING
        self.start_time = None  # first start
        self.end_time = None
        self.queue = 0  # seconds spent waiting (all waits, for preempted jobs)
        self.remain = float(self.duration)  # work left, in exclusive-speed seconds
        self.attained = 0.0  # GPU-seconds of service received (Tiresias' 2D-LAS key)
        self.rate = 1.0  # progress per second (below 1 while sharing GPUs)
        self.progress_at = None  # time `remain`/`attained` were last brought up to date
        self.preemptions = 0
        self.last_stop = None  # time of the last preemption
        self.alloc = ()  # ((node_index, (gpu ids...)), ...)
        self.partner = None  # job sharing this job's GPUs
        self.version = 0  # bumped when the completion time changes (lazy heap invalidation)
        self.shared_s = 0.0  # seconds spent sharing GPUs
        self.was_shared = False

    @property
    def is_distributed(self) -> bool:
        return len(self.alloc) > 1

    def __repr__(self):
        return f"Job({self.job_id!r}, vc={self.vc!r}, gpus={self.gpu_num}, submit={self.submit_time}, dur={self.duration})"


def ticks_to_finish(remain: float, rate: float) -> int:
    """Whole seconds of progress at `rate` needed to bring `remain` to zero."""
    if remain <= 0:
        return 0
    if rate <= 0:
        raise ValueError("a running job must progress (rate > 0)")
    # Guard against float noise turning 3.0000000001 into 4 ticks.
    return max(0, math.ceil(remain / rate - 1e-9))


def within_limit(estimate, time_limit):
    """A duration estimate capped at the job's own time limit (seconds; None: no limit known).

    Slurm ends a job at its limit, so no estimate above it can be right: every scheduler that
    orders by estimates (QSSF, Lucid live and in simulation) reads this one. A job without a
    limit, or without an estimate, keeps what it has."""
    if estimate is None or not time_limit or not estimate > time_limit:
        return estimate
    return float(time_limit)
