"""DL2: the numpy policy (no torch needed) and a smoke training run (torch: the `rl` extra).

The smoke training uses a made-up speed table and a tiny cluster (no ../shared needed): a few
supervised steps must lower the loss, a few RL updates must run, and a checkpoint must round-trip.
"""

import numpy as np
import pytest

from lucidd.elastic.dl2 import DL2Policy, Settings, SlotPlanner, drf_action, forward, init_params, read_policy
from lucidd.elastic.dl2 import save_policy
from lucidd.elastic.engine import ElasticCluster, ElasticRun, simulate_elastic
from lucidd.elastic.policies import DRF
from lucidd.elastic.workload import ElasticJob
from lucidd.errors import ConfigError


class ToySpeeds:
    batch_size = {f"m{i}": 32 for i in range(3)}

    def speed(self, model, p, w):
        if p <= 0 or w <= 0:
            return 0.0
        k = int(model[1:])
        return (30.0 + 10 * k) * min(p, 2 * w) ** 0.7 / (1 + 0.05 * w)


def toy_trace(seed, n=8):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 3))
        out.append(ElasticJob(i + 1, k, f"m{k}", int(rng.integers(0, 4)), float(rng.integers(2000, 8000)), 10,
                              (2, 4) if k < 2 else (2, 0), (2, 0), 32, (1e-3, 1.0, 0.1)))
    return out


CLUSTER = ElasticCluster(nodes=8, max_tasks=4)
ST = Settings(window=6, num_types=3, hidden=16, max_tasks=4)


def test_planner_bundles_every_job_first_and_masks_full_jobs():
    run = ElasticRun(toy_trace(1), DRF(), CLUSTER, ToySpeeds())
    run.slot = 5
    view = run.view()
    plan = SlotPlanner(view, ST)
    assert all(len(plan.ps[j.job_id]) == 1 and len(plan.w[j.job_id]) == 1 for j in plan.jobs[:4])
    m = plan.mask()
    assert m[-1] and m[: 3 * len(plan.window)].all() and not m[3 * len(plan.window): -1].any()
    a = drf_action(plan)
    assert a % 3 == 2  # DRF adds bundles


def test_policy_file_round_trips_and_runs_without_torch(tmp_path):
    params = init_params(ST, np.random.default_rng(0))
    path = tmp_path / "p.npz"
    save_policy(path, params, ST, {"note": "x"})
    p2, st2, meta = read_policy(path)
    assert st2.to_dict() == ST.to_dict() and meta == {"note": "x"}
    for k in params:
        assert np.array_equal(params[k], p2[k])
    run = simulate_elastic(toy_trace(2), DL2Policy(p2, st2), CLUSTER, ToySpeeds())
    assert run.finished
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(2))
    with pytest.raises(ConfigError, match="not a DL2 policy"):
        read_policy(bad)


def test_smoke_training_loss_falls_and_checkpoint_round_trips(tmp_path):
    torch = pytest.importorskip("torch", reason="training needs the rl extra (pip install 'lucidd[rl]')")
    from lucidd.elastic.dl2_train import Trainer, TrainConfig

    cfg = TrainConfig(window=6, hidden=16, num_types=3, batch=32, memory=512, sl_lr=1e-2, rl_lr=1e-3, seed=1)
    tr = Trainer(ToySpeeds(), CLUSTER, cfg)
    demos = tr.demonstrations([toy_trace(s) for s in range(3)])
    losses = tr.train_sl(demos, 60, log_every=10)
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])
    for s in (10, 11):
        tr.rl_episode(toy_trace(s))
    assert tr.rl_steps > 0 and any(r[0] == "rl-train" for r in tr.log)
    # the torch network and the numpy policy compute the same logits
    x, pr = torch.from_numpy(demos[0][:2]), torch.from_numpy(demos[1][:2])
    lt, _ = tr.policy(x, pr)
    ln, _ = forward(tr.policy.numpy_params(), demos[0][0], demos[1][0])
    live = np.append(np.repeat(demos[1][0], 3), True)  # absent jobs' logits are masked out anyway
    assert np.allclose(lt[0].detach().numpy()[live], ln[live], atol=1e-5)
    ck = tmp_path / "ck.pt"
    tr.save_checkpoint(ck)
    tr2 = Trainer(ToySpeeds(), CLUSTER, cfg)
    tr2.load_checkpoint(ck)
    assert (tr2.sl_steps, tr2.rl_steps, tr2.episodes) == (tr.sl_steps, tr.rl_steps, tr.episodes)
    for k, v in tr.policy.numpy_params().items():
        assert np.array_equal(v, tr2.policy.numpy_params()[k])
    # resuming with another learning rate uses it (an optimizer's saved state carries the old one)
    from dataclasses import replace

    tr3 = Trainer(ToySpeeds(), CLUSTER, replace(cfg, rl_lr=5e-4))
    tr3.load_checkpoint(ck)
    assert [g["lr"] for g in tr3.opt_pi.param_groups] == [5e-4]
    tr2.export(tmp_path / "p.npz")
    params, st, _ = read_policy(tmp_path / "p.npz")
    assert simulate_elastic(toy_trace(3), DL2Policy(params, st), CLUSTER, ToySpeeds()).finished


@pytest.mark.parametrize("reward", ["marginal", "marginal-remaining"])
def test_marginal_rewards_of_a_slot_add_up_to_its_dl2_reward(reward):
    """reward="marginal" splits DL2's slot reward over the slot's actions: with the bundle phase's
    part, the actions' rewards add up to the sum over jobs of progress / epochs. With
    "marginal-remaining" the divisor is the epochs the job had left at the slot's start, so a job's
    part is at most 1 and is 1 exactly when the slot completes it."""
    pytest.importorskip("torch", reason="training needs the rl extra (pip install 'lucidd[rl]')")
    from lucidd.elastic.dl2_train import Trainer, TrainConfig, _Actor

    with pytest.raises(ConfigError, match="reward must be"):
        TrainConfig(reward="nope")
    cfg = TrainConfig(window=6, hidden=16, num_types=3, batch=32, memory=512, seed=2, reward=reward)
    tr = Trainer(ToySpeeds(), CLUSTER, cfg)
    run = ElasticRun(toy_trace(4), DRF(), CLUSTER, ToySpeeds())
    specs = {s.job_id: s for s in run.specs}
    checked = 0
    while not run.finished and run.slot < 40:
        view = run.view()
        actor = _Actor(tr)
        alloc = actor.allocate(view)
        base = SlotPlanner(view, tr.st)  # the bundle phase alone
        by_id = {j.job_id: j for j in view.jobs}
        bundle_part = sum(actor._slot_progress(view, by_id[jid], len(base.ps[jid]), len(base.w[jid])) for jid in base.ps)
        gains = sum(g for *_, g in actor.steps)
        left = {j.job_id: j.num_epochs - j.progress for j in view.jobs}
        divisor = (lambda jid: left[jid]) if reward == "marginal-remaining" else (lambda jid: specs[jid].num_epochs)
        progressed = run.apply(alloc)
        assert all(g / divisor(j) <= 1 + 1e-9 for j, g in progressed.items())
        slot_reward = sum(g / divisor(j) for j, g in progressed.items())
        assert gains + bundle_part == pytest.approx(slot_reward, rel=1e-6, abs=1e-9)
        checked += len(actor.steps) > 1
    assert checked >= 3
