"""Training the DL2 policy (needs PyTorch: `pip install lucidd[rl]`).

1. Supervised warm-up: DRF is the teacher (DL2's HEURISTIC = "DRF"). Each slot of DRF's schedule on
   training traces is replayed in DL2's state/action form (the slot planner of lucidd.elastic.dl2:
   bundle each job first, then DRF's next bundle as the label, window positions shuffled as DL2's
   JOB_ORDER_SHUFFLE does for SL); the network is trained by cross-entropy (Adam).
2. Online RL (actor-critic): the network schedules training traces; each action of a slot gets the
   slot's reward, DL2's: the sum over jobs of the epochs it progressed in the slot / its epochs; the
   critic (same form, own weights) predicts it and the actor's loss is -log pi(a|s) x (r - V(s)) x
   importance weight, plus DL2's entropy term 0.1 x sum p log p. Transitions go to a prioritized
   replay memory (priority |r - V(s)|, proportional sampling with exponent `alpha`, importance
   weights with exponent `beta`); one minibatch update per slot once the memory holds `batch`
   transitions. Exploration is job-aware (DL2's rules): with probability `explore`, an action is
   replaced by one that gives the job with the fewest tasks a bundle or a worker when the most- and
   least-served window jobs differ by more than 3-5x in tasks, or that rebalances a job whose PS
   outnumber its workers by more than 3-7x (add a worker or a bundle) or whose workers outnumber
   half its PS (add a PS).
Checkpoints (`save_checkpoint`) hold both networks, the optimizers and the step counters (torch
format); `export` writes the numpy policy file lucidctl evaluates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from .dl2 import BUNDLE, PS, WORKER, DL2Policy, Settings, SlotPlanner, drf_action, forward, init_params, masked_probs
from .dl2 import param_shapes, save_policy
from .engine import ElasticPolicy, ElasticRun


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigError("training DL2 needs PyTorch: pip install 'lucidd[rl]' (docs/elastic.md)") from None
    return torch


def make_module(st: Settings, params: dict):
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(torch.tensor(np.asarray(v, np.float32)))
                                             for k, v in params.items()})

        def forward(self, x, present):
            p = self.p
            pr = present.float().unsqueeze(-1)
            n = pr.sum(1).clamp(min=1.0)
            h1 = torch.relu(x @ p["W1"] + p["b1"])
            ctx = (h1 * pr).sum(1) / n
            h2 = torch.relu(torch.cat([h1, ctx.unsqueeze(1).expand_as(h1)], -1) @ p["W2"] + p["b2"])
            per_job = (h2 @ p["W3"] + p["b3"]).reshape(x.shape[0], -1)
            pooled = (h2 * pr).sum(1) / n
            skip = pooled @ p["ws"] + p["bs"]
            return torch.cat([per_job, skip], 1), pooled

        def numpy_params(self):
            return {k: v.detach().cpu().numpy().copy() for k, v in self.p.items()}

    return Net()


@dataclass
class TrainConfig:
    window: int = 20
    hidden: int = 32
    num_types: int = 8
    sl_lr: float = 5e-3  # DL2's SL learning rate
    rl_lr: float = 1e-3
    batch: int = 256  # DL2's MINI_BATCH_SIZE
    memory: int = 8192  # DL2's REPLAY_MEMORY_SIZE
    entropy_weight: float = 0.1  # DL2's ENTROPY_WEIGHT
    alpha: float = 0.6
    beta: float = 0.4
    explore: float = 0.1
    seed: int = 53  # DL2's tf_seed
    threads: int = 1
    #: "slot": every action of a slot gets the slot's reward (DL2's default); "job": an action gets the
    #: progress of the job it gave a task to, the skip action the slot's mean (DL2's
    #: TS_REWARD_PLUS_JOB_REWARD, get_job_reward); "marginal": DL2's slot reward split over the slot's
    #: actions by what each added to it: the served job's progress in the slot / its epochs at its
    #: shape after the action minus before (the skip action 0). A slot's marginal rewards add up to
    #: its DL2 reward less the bundle phase's part, so the objective is DL2's; what changes is the
    #: credit: an action no longer shares one number with the few hundred others of its slot.
    #: "marginal-remaining": the same split, each job's progress divided by the epochs it had left at
    #: the slot's start instead of its epochs (not DL2's reward: a smooth count of the jobs the slot
    #: completes, which is what the average JCT counts).
    reward: str = "slot"
    #: divide the advantage by its batch's standard deviation (the marginal rewards are ~100x smaller
    #: than the slot's and the entropy term would otherwise swamp them)
    normalize_advantage: bool = False

    def __post_init__(self):
        if self.reward not in ("slot", "job", "marginal", "marginal-remaining"):
            raise ConfigError(f"reward must be slot, job, marginal or marginal-remaining, not {self.reward!r}")


class ReplayMemory:
    """Proportional prioritized replay over a ring buffer."""

    def __init__(self, size: int, st: Settings, rng):
        self.size, self.rng = size, rng
        self.x = np.zeros((size, st.window, st.features), np.float32)
        self.present = np.zeros((size, st.window), bool)
        self.mask = np.zeros((size, st.actions), bool)
        self.action = np.zeros(size, np.int64)
        self.reward = np.zeros(size, np.float32)
        self.prio = np.zeros(size, np.float64)
        self.n = 0
        self.ptr = 0

    def add(self, x, present, mask, action, reward) -> None:
        i = self.ptr
        self.x[i], self.present[i], self.mask[i], self.action[i], self.reward[i] = x, present, mask, action, reward
        self.prio[i] = self.prio[: self.n].max() if self.n else 1.0
        self.ptr = (i + 1) % self.size
        self.n = min(self.n + 1, self.size)

    def sample(self, k: int, alpha: float, beta: float):
        p = self.prio[: self.n] ** alpha
        p = p / p.sum()
        idx = self.rng.choice(self.n, size=k, p=p)
        w = (self.n * p[idx]) ** (-beta)
        return idx, (w / w.max()).astype(np.float32)

    def update(self, idx, td) -> None:
        self.prio[idx] = np.abs(td) + 1e-3


class _Actor(ElasticPolicy):
    """The network scheduling a training trace: sampled actions, job-aware exploration, and the
    transitions of the slot kept for the trainer."""

    name = "dl2-train"

    def __init__(self, trainer):
        self.t = trainer
        self.steps = []

    def _slot_progress(self, view, j, p: int, w: int) -> float:
        """The job's share of DL2's slot reward at shape (p, w): epochs it would progress in the
        slot (capped at what it has left) / its epochs."""
        if p <= 0 or w <= 0:
            return 0.0
        rate = self.t.speeds.speed(j.model, p, w) * view.cluster.slot_s / j.epoch_size
        left = j.num_epochs - j.progress
        return min(rate, left) / (left if self.t.cfg.reward == "marginal-remaining" else j.num_epochs)

    def allocate(self, view):
        t = self.t
        plan = SlotPlanner(view, t.st)
        params = t.policy_params
        self.steps = []
        while plan.window:
            m = plan.mask()
            logits, _ = forward(params, plan.x, plan.present)
            probs = masked_probs(logits, m)
            a = min(int(np.searchsorted(np.cumsum(probs), t.rng.random() * probs.sum(), side="right")), len(probs) - 1)
            while not m[a]:  # float edge of the cumulative sum
                a -= 1
            if t.cfg.explore and t.rng.random() < t.cfg.explore:
                a = t.explore_action(plan, m, a)
            x, present = plan.x.copy(), plan.present.copy()
            if a == len(probs) - 1:
                self.steps.append((x, present, m, a, None, 0.0))
                break
            j = plan.window[a // 3]
            jid = j.job_id
            before = (len(plan.ps[jid]), len(plan.w[jid]))
            if not plan.apply(a):
                break  # as in DL2: a task that does not fit ends the slot and is not a sample
            gain = None
            if t.cfg.reward.startswith("marginal"):
                gain = (self._slot_progress(view, j, len(plan.ps[jid]), len(plan.w[jid]))
                        - self._slot_progress(view, j, *before))
            self.steps.append((x, present, m, a, jid, gain))
        return plan.allocations()


@dataclass
class Trainer:
    speeds: object
    cluster: object
    cfg: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        torch = _torch()
        torch.manual_seed(self.cfg.seed)
        torch.set_num_threads(self.cfg.threads)  # tiny networks: more threads only contend
        self.rng = np.random.default_rng(self.cfg.seed)
        self.st = Settings(window=self.cfg.window, num_types=self.cfg.num_types, hidden=self.cfg.hidden,
                           max_tasks=self.cluster.max_tasks)
        self.policy = make_module(self.st, init_params(self.st, self.rng))
        self.value = make_module(self.st, init_params(self.st, self.rng))
        self.opt_sl = torch.optim.Adam(self.policy.parameters(), lr=self.cfg.sl_lr)
        self.opt_pi = torch.optim.Adam(self.policy.parameters(), lr=self.cfg.rl_lr)
        self.opt_v = torch.optim.Adam(self.value.parameters(), lr=self.cfg.rl_lr)
        self.memory = ReplayMemory(self.cfg.memory, self.st, self.rng)
        self.sl_steps = 0
        self.rl_steps = 0
        self.episodes = 0
        self.policy_params = self.policy.numpy_params()
        self.log = []  # (phase, step, value...) records: the learning curve

    # ----- supervised warm-up --------------------------------------------------------------------
    def demonstrations(self, traces) -> tuple:
        """(states, present, masks, labels) of DRF's decisions on `traces`, in the planner's form."""
        xs, ps, ms, ys = [], [], [], []

        class Teacher(ElasticPolicy):
            name = "drf-teacher"

            def allocate(inner, view):
                plan = SlotPlanner(view, self.st)
                while plan.window:
                    a = drf_action(plan)
                    m = plan.mask()
                    xs.append(plan.x.copy())
                    ps.append(plan.present.copy())
                    ms.append(m)
                    ys.append(a)
                    if a == self.st.actions - 1 or not plan.apply(a):
                        break
                return plan.allocations()

        for tr in traces:
            ElasticRun(list(tr), Teacher(), self.cluster, self.speeds).run()
        return np.stack(xs), np.stack(ps), np.stack(ms), np.array(ys)

    def _shuffle_windows(self, x, present, mask, y):
        """DL2's JOB_ORDER_SHUFFLE for SL: permute window positions (labels and masks follow)."""
        B, W = present.shape
        perm = np.argsort(self.rng.random((B, W)), axis=1)
        x = np.take_along_axis(x, perm[:, :, None], 1)
        present = np.take_along_axis(present, perm, 1)
        inv = np.argsort(perm, 1)
        jm = mask[:, :-1].reshape(B, W, 3)
        mask = np.concatenate([np.take_along_axis(jm, perm[:, :, None], 1).reshape(B, -1), mask[:, -1:]], 1)
        job = np.where(y < 3 * W, y // 3, 0)
        new_y = np.where(y < 3 * W, inv[np.arange(B), job] * 3 + y % 3, y)
        return x, present, mask, new_y

    def train_sl(self, demos, steps: int, log_every: int = 50) -> list:
        torch = _torch()
        x, present, mask, y = demos
        n = len(y)
        losses = []
        for _ in range(steps):
            idx = self.rng.integers(0, n, size=min(self.cfg.batch, n))
            bx, bp, bm, by = self._shuffle_windows(x[idx], present[idx], mask[idx], y[idx])
            logits, _ = self.policy(torch.from_numpy(bx), torch.from_numpy(bp))
            logits = logits.masked_fill(~torch.from_numpy(bm), -1e9)
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(by))
            self.opt_sl.zero_grad()
            loss.backward()
            self.opt_sl.step()
            self.sl_steps += 1
            losses.append(loss.item())
            if self.sl_steps % log_every == 0:
                self.log.append(("sl", self.sl_steps, float(np.mean(losses[-log_every:]))))
        self.policy_params = self.policy.numpy_params()
        return losses

    # ----- reinforcement learning ------------------------------------------------------------------
    def explore_action(self, plan: SlotPlanner, mask, a: int) -> int:
        rng = self.rng
        tasks = [(len(plan.ps[j.job_id]) + len(plan.w[j.job_id]), i) for i, j in enumerate(plan.window)]
        hi, lo = max(tasks)[0], min(tasks)
        if lo[0] and hi / lo[0] > rng.integers(3, 6):
            i = lo[1]
            cand = 3 * i + (BUNDLE if rng.random() < 0.5 else WORKER)
            if mask[cand]:
                return cand
        ratio = rng.integers(3, 8)
        for i, j in enumerate(plan.window):
            p, w = len(plan.ps[j.job_id]), len(plan.w[j.job_id])
            if p > w * ratio and rng.random() < 0.5:
                cand = 3 * i + (BUNDLE if rng.random() < 0.5 else WORKER)
            elif w >= p * 0.5 and rng.random() < 0.5:
                cand = 3 * i + (PS if rng.random() < 0.99 else BUNDLE)
            else:
                continue
            if mask[cand]:
                return cand
        return a

    def rl_episode(self, trace) -> float:
        """Schedule one training trace, learning as it goes; returns its average JCT in slots."""
        torch = _torch()
        actor = _Actor(self)
        run = ElasticRun(list(trace), actor, self.cluster, self.speeds)
        specs = {s.job_id: s for s in run.specs}
        while not run.finished:
            if run.slot >= run.max_slots:
                break
            view = run.view()
            alloc = actor.allocate(view)
            progressed = run.apply(alloc)
            per_job = {j: g / specs[j].num_epochs for j, g in progressed.items()}
            r = float(sum(per_job.values()))
            for x, present, m, a, jid, gain in actor.steps:
                if self.cfg.reward.startswith("marginal"):
                    rr = gain
                elif self.cfg.reward == "job":
                    rr = per_job.get(jid, 0.0) if jid is not None else (r / len(per_job) if per_job else 0.0)
                else:
                    rr = r
                self.memory.add(x, present, m, a, rr)
            if self.memory.n >= self.cfg.batch and actor.steps:
                self._update(torch)
        self.episodes += 1
        jct = run.avg_jct_slots() if run.finished else float("nan")
        self.log.append(("rl-train", self.episodes, jct))
        return jct

    def _update(self, torch) -> None:
        idx, isw = self.memory.sample(self.cfg.batch, self.cfg.alpha, self.cfg.beta)
        x = torch.from_numpy(self.memory.x[idx])
        pr = torch.from_numpy(self.memory.present[idx])
        m = torch.from_numpy(self.memory.mask[idx])
        a = torch.from_numpy(self.memory.action[idx])
        r = torch.from_numpy(self.memory.reward[idx])
        w = torch.from_numpy(isw)
        logits_v, pooled = self.value(x, pr)
        v = (pooled @ self.value.p["ws"] + self.value.p["bs"]).squeeze(-1)
        v_loss = ((r - v) ** 2 * w).mean()
        self.opt_v.zero_grad()
        v_loss.backward()
        self.opt_v.step()
        td = (r - v.detach())
        adv = td / (td.std() + 1e-8) if self.cfg.normalize_advantage else td
        logits, _ = self.policy(x, pr)
        logits = logits.masked_fill(~m, -1e9)
        logp = torch.log_softmax(logits, 1)
        chosen = logp.gather(1, a.unsqueeze(1)).squeeze(1)
        probs = logp.exp()
        ent = (probs * logp.masked_fill(~m, 0.0)).sum(1).mean()
        pi_loss = -(chosen * adv * w).mean() + self.cfg.entropy_weight * ent
        self.opt_pi.zero_grad()
        pi_loss.backward()
        self.opt_pi.step()
        self.memory.update(idx, td.numpy())
        self.rl_steps += 1
        self.policy_params = self.policy.numpy_params()
        if self.rl_steps % 50 == 0:
            self.log.append(("rl-step", self.rl_steps, pi_loss.item(), v_loss.item(), -ent.item()))

    # ----- evaluation, checkpoints ------------------------------------------------------------------
    def evaluate(self, traces, greedy: bool = True) -> float:
        pol = DL2Policy(self.policy.numpy_params(), self.st, greedy=greedy)
        jcts = [ElasticRun(list(t), pol, self.cluster, self.speeds).run().avg_jct_slots() for t in traces]
        return float(np.mean(jcts))

    def save_checkpoint(self, path) -> None:
        torch = _torch()
        torch.save({"settings": self.st.to_dict(), "cfg": self.cfg.__dict__, "policy": self.policy.state_dict(),
                    "value": self.value.state_dict(), "opt_sl": self.opt_sl.state_dict(),
                    "opt_pi": self.opt_pi.state_dict(), "opt_v": self.opt_v.state_dict(),
                    "counters": [self.sl_steps, self.rl_steps, self.episodes], "log": self.log}, path)

    def load_checkpoint(self, path) -> None:
        torch = _torch()
        ck = torch.load(path, weights_only=False)
        if ck["settings"] != self.st.to_dict():
            raise ConfigError(f"{path}: checkpoint of another network shape ({ck['settings']})")
        self.policy.load_state_dict(ck["policy"])
        self.value.load_state_dict(ck["value"])
        self.opt_sl.load_state_dict(ck["opt_sl"])
        self.opt_pi.load_state_dict(ck["opt_pi"])
        self.opt_v.load_state_dict(ck["opt_v"])
        # an optimizer's state carries its learning rate: the one configured now is the one meant
        for opt, lr in ((self.opt_sl, self.cfg.sl_lr), (self.opt_pi, self.cfg.rl_lr), (self.opt_v, self.cfg.rl_lr)):
            for group in opt.param_groups:
                group["lr"] = lr
        self.sl_steps, self.rl_steps, self.episodes = ck["counters"]
        self.log = list(ck["log"])
        self.policy_params = self.policy.numpy_params()

    def export(self, path, meta: dict | None = None) -> None:
        save_policy(path, self.policy.numpy_params(), self.st, meta)


__all__ = ["Trainer", "TrainConfig", "ReplayMemory", "make_module", "param_shapes", "time"]
