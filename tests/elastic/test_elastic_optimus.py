"""Optimus with online fitting: its speed-model and convergence-curve fits, its placement rule."""

import numpy as np
import pytest

from lucidd.elastic.engine import ElasticCluster, ElasticRun, simulate_elastic
from lucidd.elastic.optimus import (OptimusOnline, _even_placement, converge_epoch, fit_loss_curve, fit_speed_model,
                                    predict_speed)
from lucidd.elastic.workload import CONVERGENCE_GAP, ElasticJob


def test_speed_model_nnls_recovers_a_model_it_can_express():
    theta = np.array([0.002, 0.05, 0.01, 0.003, 0.004])
    samples = [(p, w, float(predict_speed(theta, p, w, 32))) for p in (1, 2, 4, 8) for w in (1, 2, 4, 8)]
    fit = fit_speed_model(samples, 32)
    pred = predict_speed(fit, 3, 5, 32)
    assert pred == pytest.approx(float(predict_speed(theta, 3, 5, 32)), rel=1e-6)
    assert fit_speed_model(samples[:1], 32) is None  # one configuration is not enough


def test_speed_model_averages_repeated_shapes():
    theta = np.array([0.002, 0.05, 0.01, 0.003, 0.004])
    base = [(p, w, float(predict_speed(theta, p, w, 32))) for p in (1, 2, 4) for w in (1, 2, 4)]
    many = base + [(4, 4, float(predict_speed(theta, 4, 4, 32)))] * 50
    assert np.allclose(fit_speed_model(many, 32), fit_speed_model(base, 32))


def test_loss_curve_fit_finds_the_convergence_epoch_from_noisy_losses():
    rng = np.random.default_rng(3)
    n = 9000.0
    b1 = 0.5
    b0 = b1 * (1 / CONVERGENCE_GAP - 1) / n
    k = np.arange(1, 2001, dtype=float)  # the first 22 % of the job
    y = (1 / (b0 * k + b1) + 0.2) * (1 + 0.05 * rng.standard_normal(len(k)))
    curve = fit_loss_curve(k, y)
    assert converge_epoch(curve) == pytest.approx(n, rel=0.15)
    assert fit_loss_curve(k[:3], y[:3]) is None


def test_even_placement_uses_the_fewest_nodes_with_equal_shares():
    c = ElasticCluster(nodes=4)
    used = [[0, 0] for _ in range(4)]
    job = ElasticJob(1, 0, "m", 0, 1.0, 1, (2, 4), (2, 0), 32, (1, 1, 0))
    ps, w = _even_placement(used, c, job, 2, 4)  # 2 PS + 4 workers = 12 CPU, 16 GPU slots: 2 nodes
    assert sorted(ps) == [0, 1] and sorted(w) == [0, 0, 1, 1]
    used[0] = [8, 8]
    used[1] = [8, 8]
    used[2] = [8, 8]
    assert _even_placement(used, c, job, 2, 4) is None


class TableSpeeds:
    batch_size = {"m": 32}

    def speed(self, model, p, w):
        return 100.0 / (0.1 * 32 / w + 1.0 + 0.5 * w / p + 0.05 * w + 0.05 * p) if p > 0 and w > 0 else 0.0


def test_optimus_online_runs_a_trace_from_its_own_observations():
    speeds = TableSpeeds()
    jobs = []
    for i in range(6):
        n = 4000.0 + 1000 * i
        b1 = 0.5
        jobs.append(ElasticJob(i + 1, 0, "m", i // 2, n, 1, (2, 4), (2, 0), 32, (b1 * (1 / CONVERGENCE_GAP - 1) / n, b1, 0.1)))
    cl = ElasticCluster(nodes=4, max_tasks=8)
    run = simulate_elastic(jobs, OptimusOnline(prior_epochs=5000), cl, speeds, speed_noise=0.02, loss_noise=0.05)
    assert run.finished and all(j.end_time is not None for j in run.jobs())
    info = [i for _, i in run.decisions_info]
    assert any(i["predicted"] for i in info)
    view = ElasticRun(jobs, OptimusOnline(), cl, speeds).view()
    assert view.jobs[0].loss_epochs is not None and len(view.jobs[0].profile) > 0


def test_pre_run_grid_spans_the_shapes_a_job_may_get():
    from lucidd.elastic.engine import profile_grid

    assert profile_grid(16) == tuple((p, w) for p in (1, 4, 10) for w in (1, 4, 10))
    assert profile_grid(4) == tuple((p, w) for p in (1, 2, 4) for w in (1, 2, 4))
    assert profile_grid(2) == ((1, 1), (1, 2), (2, 1), (2, 2))
    assert profile_grid(1) == ((1, 1),)
