"""Rigid shapes: the dl2 workload with a fixed number of PS and workers per job, so that rigid
schedulers (FIFO, Tiresias, Lucid, the `slurm` baseline) run on the same jobs.

Rule (`rigid_shapes`): a job of type m runs with k PS and k workers (k bundles), k the smallest
count whose speed reaches `RIGID_EFFICIENCY` (90 %) of the fastest bundle count of that type,
speed(k, k) >= 0.9 max_k' speed(k', k') (what a user who wants the job fast without idle tasks
would ask for). Its duration at that shape is ceil(epochs x epoch_size / speed(k, k)) seconds.

On the event-driven simulator a bundle is the unit: one PS + one worker take 4 CPU and 4 GPU slots
(4 CPU slots for the CPU-only types), and a node of 8 + 8 slots holds two bundles whatever the
types, so a job of k bundles is a job of k "GPUs" on nodes of 2 (for the GPU types a bundle is
exactly one GPU; for cnn-text-classification and dssm it stands for their CPU slots). The slot
engine runs the same shapes with `RigidFIFO` (non-preemptive, strict arrival order) to cross-check
the two engines.
"""

from __future__ import annotations

import math

import pandas as pd

from ..traces import CANONICAL_COLUMNS, LoadedTrace
from .engine import Allocation, Decision, ElasticPolicy, SlotView
from .policies import bundle

RIGID_EFFICIENCY = 0.9
BUNDLES_PER_NODE = 2  # 8 CPU + 8 GPU slots / (4 CPU + 4 GPU or 4 CPU slots)
EVENT_POLICIES = ("fifo", "tiresias", "lucid", "slurm")


def rigid_shapes(speeds, models, max_tasks: int = 16, efficiency: float = RIGID_EFFICIENCY) -> dict:
    out = {}
    for m in models:
        sp = [speeds.speed(m, k, k) for k in range(1, max_tasks + 1)]
        best = max(sp)
        out[m] = next(k for k, s in enumerate(sp, 1) if s >= efficiency * best)
    return out


def rigid_duration(spec, k: int, speeds) -> int:
    return int(math.ceil(spec.num_epochs * spec.epoch_size / speeds.speed(spec.model, k, k)))


def event_trace(trace, shapes: dict, speeds, slot_s: float, name: str = "dl2") -> LoadedTrace:
    """The trace as the event-driven simulator's canonical frame: one VC, k bundles as gpu_num."""
    rows = []
    for seq, s in enumerate(sorted(trace, key=lambda s: (s.arrival_slot, s.job_id))):
        k = shapes[s.model]
        rows.append({"job_id": str(s.job_id), "user": f"type{s.jtype + 1}", "vc": "all", "gpu_num": k, "cpu_num": 0,
                     "submit_time": int(round(s.arrival_slot * slot_s)), "duration": rigid_duration(s, k, speeds),
                     "state": "COMPLETED", "name": s.model, "row": seq + 1, "seq": seq})
    frame = pd.DataFrame(rows, columns=list(CANONICAL_COLUMNS))
    return LoadedTrace(frame, name, "csv", None)


def run_event_policies(trace, shapes, speeds, cluster, policies=EVENT_POLICIES) -> dict:
    """{policy: SimulationResult} of the event-driven simulator on the rigid shapes."""
    from ..experiment import make_experiment

    loaded = event_trace(trace, shapes, speeds, cluster.slot_s)
    exp = make_experiment(loaded, nodes=cluster.nodes, gpus_per_node=BUNDLES_PER_NODE)
    return {p: exp.run(p) for p in policies}


class RigidFIFO(ElasticPolicy):
    """Each job runs with its rigid shape from its start to its end; jobs start in arrival order,
    strictly (the first that does not fit stops the queue), as the event simulator's FIFO does.
    Bundles go to the nodes with the most free bundle room."""

    name = "rigid-fifo"

    def __init__(self, shapes: dict):
        self.shapes = shapes

    def allocate(self, view: SlotView) -> Decision:
        c = view.cluster
        room = [min(c.cpu_slots // 4, c.gpu_slots // 4) for _ in range(c.nodes)]
        out = {}
        jobs = sorted(view.jobs, key=lambda j: (j.arrival_slot, j.job_id))
        running = [j for j in jobs if j.ps > 0]
        waiting = [j for j in jobs if j.ps == 0]
        for j in running + waiting:
            k = self.shapes[j.model]
            if sum(room) < k:
                if j.ps > 0:  # cannot happen: running jobs were placed last slot and keep their room
                    raise AssertionError("rigid job lost its room")
                break
            nodes = []
            for _ in range(k):
                n = max(range(c.nodes), key=lambda i: (room[i], -i))
                room[n] -= 1
                nodes.append(n)
            assert bundle(j)[0] <= 4 and bundle(j)[1] <= 4
            out[j.job_id] = Allocation(tuple(nodes), tuple(nodes))
        return Decision(out)
