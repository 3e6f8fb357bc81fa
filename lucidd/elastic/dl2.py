"""DL2 (Peng et al., TPDS 2021): a policy network that allocates PS and workers, as an elastic policy.

Inference needs numpy only: a trained policy is a `.npz` file (weights + its settings) that
`lucidctl simulate --workload dl2 --policies dl2 --dl2-model FILE` evaluates. Training (supervised
warm-up, then actor-critic RL) needs PyTorch, the optional extra `lucidd[rl]`
(lucidd/elastic/dl2_train.py, docs/elastic.md).

One slot, as DL2's rl_env.py does it:
1. every waiting or running job first gets one PS + one worker on DL2's node order (ASSIGN_BUNDLE),
   in arrival order, while they fit;
2. then, repeatedly, the network sees the state of the scheduling window (the first `window`
   jobs by arrival that can still grow) and picks an action: add a worker, a PS, or both (a
   bundle) to one window job, or end the slot (DL2's action space, 3 x window + 1); the task goes
   on the least used node; the slot ends at the skip action or when the task does not fit.
The state per window job (DL2's INPUTS_GATE, rescaled as its INPUT_RESCALE does): job type
(one-hot), slots since arrival / 100, remaining fraction of epochs, dominant resource share,
workers / max, PS / max; absent jobs are zero rows.

The network (`Net`): DL2's job-centric representation with the per-job layers shared across the
window (a permutation-equivariant form, so what is learnt about a job type applies at every
window position): h1 = relu(x W1 + b1) per job; h2 = relu([h1, mean of h1 over present jobs] W2
+ b2); three logits per job from h2 W3 + b3, the skip logit from the mean of h2. The critic has
its own weights of the same form with a single output from the mean of h2.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import ConfigError
from .engine import Allocation, Decision, ElasticPolicy, SlotView
from .policies import NodeQueue, bundle, dominant_share

WORKER, PS, BUNDLE = 0, 1, 2


class Settings:
    """Shapes of the state and the network (saved with the weights)."""

    def __init__(self, window: int = 20, num_types: int = 8, hidden: int = 32, max_tasks: int = 16):
        self.window = window
        self.num_types = num_types
        self.hidden = hidden
        self.max_tasks = max_tasks

    @property
    def features(self) -> int:
        return self.num_types + 5

    @property
    def actions(self) -> int:
        return 3 * self.window + 1

    def to_dict(self) -> dict:
        return {"window": self.window, "num_types": self.num_types, "hidden": self.hidden, "max_tasks": self.max_tasks}


PARAM_SHAPES = (("W1", "F", "H"), ("b1", "H"), ("W2", "2H", "H"), ("b2", "H"), ("W3", "H", 3), ("b3", 3),
                ("ws", "H", 1), ("bs", 1))


def param_shapes(st: Settings) -> dict:
    dims = {"F": st.features, "H": st.hidden, "2H": 2 * st.hidden}
    return {name: tuple(dims.get(d, d) for d in shape) for name, *shape in PARAM_SHAPES}


def init_params(st: Settings, rng: np.random.Generator) -> dict:
    out = {}
    for name, shape in param_shapes(st).items():
        if name.startswith("W") or name == "ws":
            out[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / shape[0])).astype(np.float32)
        else:
            out[name] = np.zeros(shape, np.float32)
    return out


def forward(params: dict, x: np.ndarray, present: np.ndarray):
    """One state: x (window, F), present (window,) bool -> (logits (3 window + 1,), pooled h2).
    Present jobs fill the first rows of the window (absent rows are zero and get no logits that
    count: the mask removes them)."""
    n = int(present.sum())
    W = x.shape[0]
    H = params["b1"].shape[0]
    if n == 0:
        return np.concatenate([np.zeros(3 * W, np.float32), params["bs"]]), np.zeros(H, np.float32)
    xs = x[:n]
    h1 = np.maximum(xs @ params["W1"] + params["b1"], 0.0)
    ctx = h1.mean(0)
    W2 = params["W2"]
    h2 = np.maximum(h1 @ W2[:H] + (ctx @ W2[H:] + params["b2"]), 0.0)
    per_job = np.zeros((W, 3), np.float32)
    per_job[:n] = h2 @ params["W3"] + params["b3"]
    pooled = h2.mean(0)
    skip = pooled @ params["ws"] + params["bs"]
    return np.concatenate([per_job.reshape(-1), skip]), pooled


def masked_probs(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, -np.inf)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


class SlotPlanner:
    """One slot's planning state: the window, the state matrix, the mask and the node queue."""

    def __init__(self, view: SlotView, st: Settings):
        self.view = view
        self.st = st
        c = view.cluster
        self.nq = NodeQueue(c.nodes, c.capacity)
        self.jobs = sorted(view.jobs, key=lambda j: (j.arrival_slot, j.job_id))
        self.ps = {j.job_id: [] for j in self.jobs}
        self.w = {j.job_id: [] for j in self.jobs}
        self.max_tasks = min(st.max_tasks, c.max_tasks)
        # ASSIGN_BUNDLE: one PS + one worker each, in arrival order, while they fit
        for j in self.jobs:
            node = self.nq.try_alloc(bundle(j))
            if node is not None:
                self.ps[j.job_id].append(node)
                self.w[j.job_id].append(node)
        self._refresh()

    def _refresh(self) -> None:
        mt = self.max_tasks
        self.window = [j for j in self.jobs if not (len(self.w[j.job_id]) >= mt and len(self.ps[j.job_id]) >= mt)]
        self.window = self.window[: self.st.window]
        self.x = np.zeros((self.st.window, self.st.features), np.float32)
        self.present = np.zeros(self.st.window, bool)
        for i, j in enumerate(self.window):
            self._row(i, j)

    def _row(self, i: int, j) -> None:
        st, c = self.st, self.view.cluster
        p, w = len(self.ps[j.job_id]), len(self.w[j.job_id])
        r = self.x[i]
        r[:] = 0.0
        r[min(j.jtype, st.num_types - 1)] = 1.0
        k = st.num_types
        r[k] = (self.view.slot - j.arrival_slot) / 100.0
        r[k + 1] = 1.0 - j.progress / j.num_epochs
        r[k + 2] = dominant_share(j, p, w, c)
        r[k + 3] = w / st.max_tasks
        r[k + 4] = p / st.max_tasks
        self.present[i] = True

    def mask(self) -> np.ndarray:
        m = np.zeros(self.st.actions, bool)
        mt = self.max_tasks
        for i, j in enumerate(self.window):
            wf = len(self.w[j.job_id]) >= mt
            pf = len(self.ps[j.job_id]) >= mt
            m[3 * i + WORKER] = not wf
            m[3 * i + PS] = not pf
            m[3 * i + BUNDLE] = not (wf or pf)
        m[-1] = True
        return m

    def apply(self, action: int) -> bool:
        """Carry out a non-skip action; False if its task does not fit (the slot then ends)."""
        i, kind = divmod(action, 3)
        j = self.window[i]
        demand = (j.worker_demand if kind == WORKER else j.ps_demand if kind == PS else bundle(j))
        node = self.nq.try_alloc(demand)
        if node is None:
            return False
        if kind in (WORKER, BUNDLE):
            self.w[j.job_id].append(node)
        if kind in (PS, BUNDLE):
            self.ps[j.job_id].append(node)
        if len(self.w[j.job_id]) >= self.max_tasks and len(self.ps[j.job_id]) >= self.max_tasks:
            self._refresh()
        else:
            self._row(i, j)
        return True

    def allocations(self) -> dict:
        return {jid: Allocation(tuple(self.ps[jid]), tuple(self.w[jid])) for jid in self.ps if self.ps[jid] or self.w[jid]}


def drf_action(planner: SlotPlanner) -> int:
    """The teacher for the supervised warm-up: DRF's next bundle (lowest dominant share, then
    arrival, then id, among window jobs that can take a bundle), or skip."""
    best, best_key = None, None
    c = planner.view.cluster
    mt = planner.max_tasks
    for i, j in enumerate(planner.window):
        p, w = len(planner.ps[j.job_id]), len(planner.w[j.job_id])
        if p >= mt or w >= mt:
            continue
        key = (dominant_share(j, p, w, c), j.arrival_slot, j.job_id)
        if best_key is None or key < best_key:
            best, best_key = i, key
    return planner.st.actions - 1 if best is None else 3 * best + BUNDLE


class DL2Policy(ElasticPolicy):
    """The trained network as an elastic policy. `greedy`: the most likely action (default);
    otherwise actions are sampled from the network's distribution with a generator seeded by
    (seed, slot), so a run is reproducible."""

    name = "dl2"

    def __init__(self, params: dict, settings: Settings, greedy: bool = True, seed: int = 0, max_actions: int = 100000):
        self.params = params
        self.st = settings
        self.greedy = greedy
        self.seed = seed
        self.max_actions = max_actions

    def allocate(self, view: SlotView) -> Decision:
        plan = SlotPlanner(view, self.st)
        rng = None if self.greedy else np.random.default_rng([self.seed, view.slot])
        for _ in range(self.max_actions):
            if not plan.window:
                break
            m = plan.mask()
            logits, _ = forward(self.params, plan.x, plan.present)
            probs = masked_probs(logits, m)
            a = int(np.argmax(probs)) if rng is None else int(rng.choice(len(probs), p=probs))
            if a == len(probs) - 1 or not plan.apply(a):
                break
        return Decision(plan.allocations())


def save_policy(path, params: dict, settings: Settings, meta: dict | None = None) -> None:
    np.savez(path, __settings__=np.array(json.dumps({**settings.to_dict(), "meta": meta or {}})),
             **{k: np.asarray(v, np.float32) for k, v in params.items()})


def read_policy(path) -> tuple[dict, Settings, dict]:
    try:
        with np.load(path, allow_pickle=False) as z:
            cfg = json.loads(str(z["__settings__"]))
            meta = cfg.pop("meta", {})
            st = Settings(**cfg)
            params = {k: z[k] for k in z.files if k != "__settings__"}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a DL2 policy file ({exc})") from None
    want = param_shapes(st)
    for k, shape in want.items():
        if k not in params or tuple(params[k].shape) != shape:
            raise ConfigError(f"{path}: weight {k} missing or of the wrong shape")
    return params, st, meta


def load_policy(path, exp=None) -> DL2Policy:
    if not path:
        raise ConfigError("the dl2 policy needs a trained policy file (--dl2-model FILE; docs/elastic.md)")
    params, st, _ = read_policy(path)
    return DL2Policy(params, st)
