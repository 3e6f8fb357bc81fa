"""Elastic baselines as DL2's simulator runs them: DRF, FIFO, SRTF, Tetris, Optimus-oracle.

Each is a pure function of the SlotView (and, for Optimus-oracle, of the true speed table): it
plans the slot's tasks on an empty cluster, one task at a time, on DL2's node order, and
returns an Allocation per job. The rules, from DL2's *_env.py (pengyanghua/DL2), are restated here:

- Node order (`NodeQueue`): the node with the fewest used CPU+GPU slots first, lowest index on
  ties; a task that does not fit on that node fails (the policies then stop, as DL2's do).
- DRF: jobs keyed by (dominant share, arrival, id); the first gets one PS + one worker on the
  next node, is re-keyed by its new dominant share while it has fewer than max tasks; stop at
  the first task that does not fit.
- FIFO / SRTF: jobs by arrival (FIFO) or by remaining fraction of epochs, then arrival (SRTF);
  each takes up to max_tasks PS+worker bundles in turn; stop at the first that does not fit.
- Tetris: nodes in index order; on each node, jobs by the score alignment + weight x
  (slots of a bundle x remaining fraction), weight = mean alignment / mean of the second term,
  alignment = free slots of the node . bundle slots; the best job below max workers gets a bundle
  on the node, the node is tried again until a bundle fails there.
- Optimus-oracle: marginal gain with true speeds and true remaining epochs: a job's next task is
  the one (worker or PS) that cuts its remaining time rem/speed the most; the task with the
  largest cut cluster-wide is placed next; stop when no cut is positive or a task does not fit.
  Every job first gets one worker and one PS.
Ties between jobs fall to the lower job id.
"""

from __future__ import annotations

import heapq

from .engine import Allocation, Decision, ElasticPolicy, SlotView

BIG = 2147483647  # DL2's -np.iinfo(np.int32).max utility for a job without a worker or a PS


class NodeQueue:
    """DL2's node_used_resr_queue: per-node used (CPU, GPU) slots; least used first."""

    __slots__ = ("heap", "used", "cap")

    def __init__(self, nodes: int, cap: tuple):
        self.heap = [(0, i) for i in range(nodes)]
        self.used = [[0, 0] for _ in range(nodes)]
        self.cap = cap

    def fits(self, node: int, demand) -> bool:
        u = self.used[node]
        return u[0] + demand[0] <= self.cap[0] and u[1] + demand[1] <= self.cap[1]

    def take(self, node: int, demand) -> None:
        u = self.used[node]
        u[0] += demand[0]
        u[1] += demand[1]

    def try_alloc(self, demand):
        """Place one task needing `demand` on the least used node; the node, or None if it does not fit."""
        _, node = heapq.heappop(self.heap)
        ok = self.fits(node, demand)
        if ok:
            self.take(node, demand)
        u = self.used[node]
        heapq.heappush(self.heap, (u[0] + u[1], node))
        return node if ok else None


class _Plan:
    """Per-job task lists being built for one slot."""

    def __init__(self, view: SlotView):
        self.view = view
        self.ps = {j.job_id: [] for j in view.jobs}
        self.w = {j.job_id: [] for j in view.jobs}

    def allocations(self) -> dict:
        return {jid: Allocation(tuple(self.ps[jid]), tuple(self.w[jid])) for jid in self.ps if self.ps[jid] or self.w[jid]}


def bundle(job) -> tuple:
    return (job.worker_demand[0] + job.ps_demand[0], job.worker_demand[1] + job.ps_demand[1])


def dominant_share(job, ps: int, workers: int, cluster) -> float:
    caps = (cluster.nodes * cluster.cpu_slots, cluster.nodes * cluster.gpu_slots)
    return max(1.0 * (workers * job.worker_demand[r] + ps * job.ps_demand[r]) / caps[r] for r in range(2))


class DRF(ElasticPolicy):
    name = "drf"

    def allocate(self, view: SlotView) -> Decision:
        c = view.cluster
        plan, nq = _Plan(view), NodeQueue(c.nodes, c.capacity)
        heap = [(0, j.arrival_slot, j.job_id, j) for j in view.jobs]
        heapq.heapify(heap)
        while heap:
            _, arr, jid, job = heapq.heappop(heap)
            node = nq.try_alloc(bundle(job))
            if node is None:
                break
            plan.w[jid].append(node)
            plan.ps[jid].append(node)
            w, p = len(plan.w[jid]), len(plan.ps[jid])
            if w < c.max_tasks and p < c.max_tasks:
                heapq.heappush(heap, (dominant_share(job, p, w, c), arr, jid, job))
        return Decision(plan.allocations())


class _Greedy(ElasticPolicy):
    """FIFO / SRTF: jobs in key order, each up to max_tasks bundles, stop at the first miss."""

    def key(self, job):
        raise NotImplementedError

    def allocate(self, view: SlotView) -> Decision:
        c = view.cluster
        plan, nq = _Plan(view), NodeQueue(c.nodes, c.capacity)
        for job in sorted(view.jobs, key=self.key):
            for _ in range(c.max_tasks):
                node = nq.try_alloc(bundle(job))
                if node is None:
                    return Decision(plan.allocations())
                plan.w[job.job_id].append(node)
                plan.ps[job.job_id].append(node)
        return Decision(plan.allocations())


class FIFO(_Greedy):
    name = "fifo"

    def key(self, job):
        return (job.arrival_slot, job.job_id)


class SRTF(_Greedy):
    """DL2's SRTF: the smallest remaining *fraction* of epochs first."""

    name = "srtf"

    def key(self, job):
        return (1 - job.progress / job.num_epochs, job.arrival_slot, job.job_id)


class Tetris(ElasticPolicy):
    name = "tetris"

    def allocate(self, view: SlotView) -> Decision:
        c = view.cluster
        plan, nq = _Plan(view), NodeQueue(c.nodes, c.capacity)
        jobs = list(view.jobs)
        if not jobs:
            return Decision({})
        bundles = {j.job_id: bundle(j) for j in jobs}
        resr = {j.job_id: (bundles[j.job_id][0] + bundles[j.job_id][1]) * (1 - j.progress / j.num_epochs) for j in jobs}
        mean_resr = float(sum(resr.values())) / len(resr)
        for node in range(c.nodes):
            while True:
                used = nq.used[node]
                free = (c.cpu_slots - used[0], c.gpu_slots - used[1])
                align = {jid: free[0] * b[0] + free[1] * b[1] for jid, b in bundles.items()}
                weight = (float(sum(align.values())) / len(align)) / mean_resr
                if weight == 0:
                    break
                order = sorted(jobs, key=lambda j: (-(align[j.job_id] + weight * resr[j.job_id]), j.job_id))
                placed = False
                for j in order:
                    if len(plan.w[j.job_id]) >= c.max_tasks:
                        continue
                    b = bundles[j.job_id]
                    if nq.fits(node, b):
                        nq.take(node, b)
                        plan.w[j.job_id].append(node)
                        plan.ps[j.job_id].append(node)
                        placed = True
                    break
                if not placed:
                    break
        return Decision(plan.allocations())


class MarginalGain(ElasticPolicy):
    """Optimus' greedy allocation on DL2's node order, given a speed and a remaining-epochs function.

    Subclasses give `speed(job, ps, workers)` (epochs per slot) and `remaining(job)` (epochs)."""

    def speed(self, job, ps: int, workers: int) -> float:
        raise NotImplementedError

    def remaining(self, job) -> float:
        raise NotImplementedError

    def utility(self, job, p: int, w: int, rem: float):
        if w == 0:
            return (-BIG, "worker")
        if p == 0:
            return (-BIG, "ps")
        s = self.speed(job, p, w)
        s_w = self.speed(job, p, w + 1)
        s_p = self.speed(job, p + 1, w)
        worker_u = rem / s - rem / s_w
        ps_u = rem / s - rem / s_p
        if ps_u >= worker_u:
            return (-ps_u, "ps")
        return (-worker_u, "worker")

    def allocate(self, view: SlotView) -> Decision:
        c = view.cluster
        plan, nq = _Plan(view), NodeQueue(c.nodes, c.capacity)
        rem = {j.job_id: self.remaining(j) for j in view.jobs}
        heap = []
        for j in view.jobs:
            u, role = self.utility(j, 0, 0, rem[j.job_id])
            heap.append((u, j.job_id, role, j))
        heapq.heapify(heap)
        while heap:
            u, jid, role, job = heapq.heappop(heap)
            if u >= 0:
                break
            tasks = plan.w[jid] if role == "worker" else plan.ps[jid]
            if len(tasks) >= c.max_tasks:
                continue
            node = nq.try_alloc(job.worker_demand if role == "worker" else job.ps_demand)
            if node is None:
                break
            tasks.append(node)
            u, role = self.utility(job, len(plan.ps[jid]), len(plan.w[jid]), rem[jid])
            heapq.heappush(heap, (u, jid, role, job))
        return Decision(plan.allocations())


class OptimusOracle(MarginalGain):
    """Optimus with the true speed table and the true remaining epochs (DL2's optimus_env)."""

    name = "optimus-oracle"

    def __init__(self, speeds, slot_s: float = 1200.0):
        self.speeds = speeds
        self.slot_s = slot_s

    def speed(self, job, ps, workers):
        return self.speeds.speed(job.model, ps, workers) * self.slot_s / job.epoch_size

    def remaining(self, job):
        return job.num_epochs - job.progress


ELASTIC_BASELINES = {"drf": DRF, "fifo": FIFO, "srtf": SRTF, "tetris": Tetris}
