"""Optimus (Peng et al., EuroSys '18) with online fitting, as a pure elastic policy.

Per job, from what the job has shown so far (never from the true speed table or epoch count):
- Speed model (synchronous training): f(p, w) = 1 / (t0 M/w + t1 + t2 w/p + t3 w + t4 p), M the
  job's total batch size, fitted by non-negative least squares (scipy.optimize.nnls) on
  1/f = t . (M/w, 1, w/p, w, p), each observation weighted by its speed so that residuals are
  relative errors. Observations: the job's pre-run at arrival (a few (p, w) pairs, `JobView.profile`)
  and the speed it ran at in every slot (`JobView.speeds`).
- Convergence: loss(k) = 1 / (b0 k + b1) + b2 (b >= 0), fitted by bounded least squares
  (scipy.optimize.least_squares) on the per-epoch losses the simulator emits (averaged into at most
  `loss_bins` bins of epochs). The job converges when its loss is within CONVERGENCE_GAP of the
  floor relative to the initial gap, i.e. at k* = b1 (1/gap - 1) / b0; remaining = k* - epochs done.
  A job with too few losses yet is assumed to need `prior_epochs`.
- Allocation: marginal gain (lucidd.elastic.policies.MarginalGain) on these estimates: the next task
  cluster-wide is the worker or PS whose addition cuts its job's estimated remaining time
  rem/f(p, w) the most, while the cluster's CPU and GPU slots last and the cut is positive.
- Placement (Optimus' rule): a job's PS and workers go on the fewest nodes that can hold them with
  each node holding an equal share (as equal as integer counts allow) of its PS and of its
  workers, largest jobs first, on the nodes with the most free slots; a job that cannot be placed
  drops its last-added tasks until it can (at least one PS and one worker), or waits.
`placement="dl2"` instead places task by task on DL2's least-used node (as Optimus-oracle does),
to separate the effect of the estimates from that of the placement.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from .engine import Allocation, Decision, SlotView
from .policies import BIG, MarginalGain, NodeQueue, _Plan
from .workload import CONVERGENCE_GAP


def speed_features(p, w, batch: float) -> np.ndarray:
    p = np.asarray(p, float)
    w = np.asarray(w, float)
    return np.stack([batch / w, np.ones_like(w), w / p, w, p], axis=-1)


def fit_speed_model(samples, batch: float) -> np.ndarray | None:
    """NNLS fit of Optimus' synchronous speed model; samples = [(p, w, speed)]. None without enough data."""
    from scipy.optimize import nnls

    by_cfg: dict = {}
    for p, w, s in samples:
        if p > 0 and w > 0 and s > 0:
            by_cfg.setdefault((p, w), []).append(s)
    if len(by_cfg) < 2:
        return None
    # one point per distinct configuration (the mean of its observations), so that a shape run
    # for many slots does not outweigh the rest of the surface
    arr = np.array([(p, w, float(np.mean(v))) for (p, w), v in sorted(by_cfg.items())], float)
    X = speed_features(arr[:, 0], arr[:, 1], batch)
    f = arr[:, 2]
    theta, _ = nnls(X * f[:, None], np.ones_like(f))
    if not np.any(theta > 0):
        return None
    return theta


def predict_speed(theta: np.ndarray, p, w, batch: float):
    d = speed_features(p, w, batch) @ theta
    return np.where(d > 0, 1.0 / np.maximum(d, 1e-300), 0.0)


def _bin(epochs, losses, bins: int):
    epochs = np.asarray(epochs, float)
    losses = np.asarray(losses, float)
    if len(epochs) <= bins:
        return epochs, losses, np.ones(len(epochs))
    edges = np.linspace(epochs[0], epochs[-1] + 1e-9, bins + 1)
    idx = np.clip(np.searchsorted(edges, epochs, side="right") - 1, 0, bins - 1)
    cnt = np.bincount(idx, minlength=bins).astype(float)
    keep = cnt > 0
    k = np.bincount(idx, weights=epochs, minlength=bins)[keep] / cnt[keep]
    y = np.bincount(idx, weights=losses, minlength=bins)[keep] / cnt[keep]
    return k, y, cnt[keep]


def fit_loss_curve(epochs, losses, bins: int = 100):
    """Least-squares fit of loss(k) = 1/(b0 k + b1) + b2 with b >= 0; (b0, b1, b2) or None.

    For a fixed floor b2 the model is linear in (b0, b1) after z = 1/(loss - b2); that weighted
    linear fit (weights (loss - b2)^2, the first-order map of loss residuals onto z) is solved for
    each b2 tried, and b2 is chosen in [0, min loss) by bounded scalar search on the squared loss
    residuals. The per-epoch losses are first averaged into at most `bins` bins of epochs."""
    from scipy.optimize import minimize_scalar

    if epochs is None or len(epochs) < 8:
        return None
    k, y, cnt = _bin(epochs, losses, bins)
    if len(k) < 4:
        return None
    top = float(np.min(y))
    if top <= 0:
        return None

    def solve(b2):
        g = y - b2
        if np.any(g <= 0):
            return None
        z = 1.0 / g
        w = cnt * g ** 4  # squared weights of the first-order map (dz = -dy / g^2)
        sw_, sk, sz = w.sum(), (w * k).sum(), (w * z).sum()
        skk, skz = (w * k * k).sum(), (w * k * z).sum()
        det = sw_ * skk - sk * sk
        if det <= 0:
            return None
        b0 = (sw_ * skz - sk * sz) / det
        b1 = (sz - b0 * sk) / sw_
        return max(float(b0), 1e-12), max(float(b1), 1e-12)

    def sse(b2):
        s = solve(b2)
        if s is None:
            return np.inf
        pred = 1.0 / (s[0] * k + s[1]) + b2
        return float(np.sum(cnt * (pred - y) ** 2))

    r = minimize_scalar(sse, bounds=(0.0, top * (1 - 1e-6)), method="bounded", options={"xatol": top * 1e-4})
    b2 = float(r.x)
    s = solve(b2)
    if s is None:
        return None
    return (s[0], s[1], b2)


def converge_epoch(curve, gap: float = CONVERGENCE_GAP) -> float:
    b0, b1, _ = curve
    return b1 * (1.0 / gap - 1.0) / b0


class OptimusOnline(MarginalGain):
    name = "optimus"
    needs_losses = True

    def __init__(self, slot_s: float = 1200.0, prior_epochs: float = 14325.0, placement: str = "optimus",
                 loss_bins: int = 100, min_remaining: float = 1.0):
        if placement not in ("optimus", "dl2"):
            raise ValueError("placement: 'optimus' or 'dl2'")
        self.slot_s = slot_s
        self.prior_epochs = prior_epochs
        self.placement = placement
        self.loss_bins = loss_bins
        self.min_remaining = min_remaining
        self._speed_fits = {}  # (job id, samples seen) -> theta: a memo of a pure function
        self._loss_fits = {}

    # ----- estimates ---------------------------------------------------------------------------
    def theta(self, job):
        key = (job.job_id, len(job.speeds))
        if key not in self._speed_fits:
            self._speed_fits = {k: v for k, v in self._speed_fits.items() if k[0] != job.job_id}
            self._speed_fits[key] = fit_speed_model(list(job.profile) + list(job.speeds), job.batch_size)
        return self._speed_fits[key]

    def speed(self, job, ps, workers):
        th = self.theta(job)
        if th is None:
            return 1.0  # no data at all: every shape looks alike (no gain from more tasks)
        d = th[0] * job.batch_size / workers + th[1] + th[2] * workers / ps + th[3] * workers + th[4] * ps
        return self.slot_s / d if d > 0 else 0.0

    def converge_estimate(self, job):
        n = 0 if job.loss_epochs is None else len(job.loss_epochs)
        key = (job.job_id, n)
        if key not in self._loss_fits:
            self._loss_fits = {k: v for k, v in self._loss_fits.items() if k[0] != job.job_id}
            curve = fit_loss_curve(job.loss_epochs, job.loss_values, self.loss_bins) if n else None
            self._loss_fits[key] = converge_epoch(curve) if curve is not None else None
        return self._loss_fits[key]

    def remaining(self, job):
        k = self.converge_estimate(job)
        if k is None or not math.isfinite(k):
            k = self.prior_epochs
        return max(k - job.progress, self.min_remaining)

    # ----- allocation + placement --------------------------------------------------------------
    def allocate(self, view: SlotView) -> Decision:
        info = {"predicted": {}, "remaining_at": {}}
        if self.placement == "dl2":
            d = super().allocate(view)
            allocs = d.allocations
        else:
            counts = self._counts(view)
            allocs = self._place(view, counts)
        by_id = {j.job_id: j for j in view.jobs}
        for jid, a in allocs.items():
            job = by_id[jid]
            info["remaining_at"][jid] = (self.remaining(job), job.progress)
            if a.ps and a.workers:
                th = self.theta(job)
                if th is not None:
                    info["predicted"][jid] = (a.ps, a.workers, float(predict_speed(th, a.ps, a.workers, job.batch_size)))
        return Decision(allocs, info)

    def _counts(self, view: SlotView) -> dict:
        c = view.cluster
        free = [c.nodes * c.cpu_slots, c.nodes * c.gpu_slots]
        rem = {j.job_id: self.remaining(j) for j in view.jobs}
        counts = {j.job_id: [0, 0] for j in view.jobs}  # ps, workers
        heap = []
        for j in view.jobs:
            u, role = self.utility(j, 0, 0, rem[j.job_id])
            heap.append((u, j.job_id, role, j))
        heapq.heapify(heap)
        while heap:
            u, jid, role, job = heapq.heappop(heap)
            if u >= 0:
                break
            k = 1 if role == "worker" else 0
            if counts[jid][k] >= c.max_tasks:
                continue
            dem = job.worker_demand if role == "worker" else job.ps_demand
            if dem[0] > free[0] or dem[1] > free[1]:
                continue  # this job's next task does not fit any more; others may
            free[0] -= dem[0]
            free[1] -= dem[1]
            counts[jid][k] += 1
            u, role = self.utility(job, counts[jid][0], counts[jid][1], rem[jid])
            heapq.heappush(heap, (u, jid, role, job))
        return counts

    def _place(self, view: SlotView, counts: dict) -> dict:
        c = view.cluster
        used = [[0, 0] for _ in range(c.nodes)]
        by_id = {j.job_id: j for j in view.jobs}

        def size(jid):
            j, (p, w) = by_id[jid], counts[jid]
            return p * sum(j.ps_demand) + w * sum(j.worker_demand)

        out = {}
        for jid in sorted((k for k, v in counts.items() if v[0] and v[1]), key=lambda k: (-size(k), k)):
            job = by_id[jid]
            p, w = counts[jid]
            placed = None
            while p >= 1 and w >= 1:
                placed = _even_placement(used, c, job, p, w)
                if placed is not None:
                    break
                if w >= p and w > 1:  # drop tasks, the more numerous kind first
                    w -= 1
                elif p > 1:
                    p -= 1
                else:
                    w -= 1
            if placed is not None:
                ps_nodes, w_nodes = placed
                for n in ps_nodes:
                    used[n][0] += job.ps_demand[0]
                    used[n][1] += job.ps_demand[1]
                for n in w_nodes:
                    used[n][0] += job.worker_demand[0]
                    used[n][1] += job.worker_demand[1]
                out[jid] = Allocation(tuple(ps_nodes), tuple(w_nodes))
        return out


def _split(n: int, k: int) -> list:
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _even_placement(used, c, job, p: int, w: int):
    """PS and workers of one job on the fewest nodes, each node an equal share; None if impossible."""
    order = sorted(range(c.nodes), key=lambda n: (-(c.cpu_slots - used[n][0] + c.gpu_slots - used[n][1]), n))
    for k in range(1, min(c.nodes, max(p, w)) + 1):
        ps_share, w_share = _split(p, k), _split(w, k)
        nodes = order[:k]
        ok = True
        for n, a, b in zip(nodes, ps_share, w_share):
            cpu = a * job.ps_demand[0] + b * job.worker_demand[0]
            gpu = a * job.ps_demand[1] + b * job.worker_demand[1]
            if used[n][0] + cpu > c.cpu_slots or used[n][1] + gpu > c.gpu_slots:
                ok = False
                break
        if ok:
            ps_nodes = [n for n, a in zip(nodes, ps_share) for _ in range(a)]
            w_nodes = [n for n, b in zip(nodes, w_share) for _ in range(b)]
            return ps_nodes, w_nodes
    return None


__all__ = ["OptimusOnline", "fit_speed_model", "predict_speed", "fit_loss_curve", "converge_epoch", "BIG", "NodeQueue",
           "_Plan"]
