"""The slot engine, DL2's workload generator and the heuristic policies.

Tests marked `shared` read DL2's measured speed table and workload constants from ../shared/dl2
(never bundled: the DL2 repository has no licence) and skip when it is absent.
"""

import numpy as np
import pytest

from lucidd.elastic.engine import Allocation, ElasticCluster, ElasticError, ElasticPolicy, ElasticRun, simulate_elastic
from lucidd.elastic.policies import DRF, FIFO, SRTF, NodeQueue, OptimusOracle, Tetris
from lucidd.elastic.workload import ElasticJob
from tests.conftest import SHARED

DL2 = SHARED / "dl2"
needs_dl2 = pytest.mark.skipif(not (DL2 / "config_speed.txt").is_file(), reason=f"needs DL2's data in {DL2}")


class LinearSpeeds:
    """A made-up speed table: speed = base x min(p, w) (samples/s)."""

    batch_size = {"m": 32}

    def __init__(self, base=10.0):
        self.base = base

    def speed(self, model, p, w):
        return self.base * min(p, w) if p > 0 and w > 0 else 0.0


def job(jid, arrival=0, epochs=10.0, epoch_size=1, worker=(2, 4), ps=(2, 0)):
    return ElasticJob(jid, 0, "m", arrival, float(epochs), epoch_size, worker, ps, 32, (1e-3, 1.0, 0.1))


class Fixed(ElasticPolicy):
    name = "fixed"

    def __init__(self, shape):
        self.shape = shape

    def allocate(self, view):
        out = {}
        for i, j in enumerate(view.jobs):
            p, w = self.shape
            out[j.job_id] = Allocation(tuple([i] * p), tuple([i] * w))
        return out


def test_completion_inside_a_slot_is_timed_finely():
    # 1 PS + 1 worker at 10 samples/s, epoch size 1: 12,000 epochs per 1,200 s slot
    cl = ElasticCluster(nodes=2, max_tasks=4)
    run = simulate_elastic([job(1, epochs=18000), job(2, arrival=1, epochs=6000)], Fixed((1, 1)), cl, LinearSpeeds())
    j1, j2 = run.jobs()
    assert j1.end_time == pytest.approx(1800.0)  # 1.5 slots
    assert j2.submit_time == 1200 and j2.end_time == pytest.approx(1800.0)
    assert run.avg_jct_slots() == pytest.approx((1.5 + 0.5) / 2)
    res = run.result()
    assert list(res.jobs.columns[:14]) == ["job_id", "vc", "user", "gpu_num", "submit_time", "duration", "start_time",
                                           "end_time", "queue_s", "preemptions", "shared", "shared_s", "estimate_s",
                                           "jct_s"]
    assert res.jobs["jct_s"].tolist() == pytest.approx([1800.0, 600.0])


def test_capacity_and_task_limits_are_enforced():
    cl = ElasticCluster(nodes=1, max_tasks=4)
    with pytest.raises(ElasticError, match="over capacity"):
        simulate_elastic([job(1)], Fixed((1, 3)), cl, LinearSpeeds())  # 3 workers x 4 GPU slots > 8
    with pytest.raises(ElasticError, match="at most 4"):
        simulate_elastic([job(1, worker=(1, 0), ps=(1, 0))], Fixed((1, 5)), cl, LinearSpeeds())


def test_a_job_without_tasks_queues_and_a_stopped_job_counts_a_preemption():
    class StopSecond(ElasticPolicy):
        name = "stop"

        def allocate(self, view):
            return {} if view.slot == 1 else {j.job_id: Allocation((0,), (0,)) for j in view.jobs}

    run = simulate_elastic([job(1, epochs=24000)], StopSecond(), ElasticCluster(nodes=1), LinearSpeeds())
    (j,) = run.jobs()
    assert j.end_time == 3600 and j.queue == 1200 and j.preemptions == 1 and j.start_time == 0


def test_node_queue_is_least_used_first_lowest_index_on_ties():
    nq = NodeQueue(3, (8, 8))
    assert [nq.try_alloc((4, 4)) for _ in range(4)] == [0, 1, 2, 0]
    assert nq.try_alloc((4, 4)) == 1 and nq.try_alloc((4, 4)) == 2
    assert nq.try_alloc((1, 0)) is None  # the least used node is full: DL2's policies stop here


def test_drf_shares_bundles_and_fifo_serves_in_order():
    cl = ElasticCluster(nodes=2, max_tasks=4)  # room for 4 bundles of (4 CPU, 4 GPU)
    view = ElasticRun([job(1, epochs=1e6), job(2, epochs=1e6)], DRF(), cl, LinearSpeeds()).view()
    a = DRF().allocate(view).allocations
    assert (a[1].ps, a[1].workers, a[2].ps, a[2].workers) == (2, 2, 2, 2)
    a = FIFO().allocate(view).allocations
    assert (a[1].ps, a[1].workers) == (4, 4) and 2 not in a
    assert set(Tetris().allocate(view).allocations) <= {1, 2}


def test_srtf_orders_by_remaining_fraction():
    cl = ElasticCluster(nodes=2, max_tasks=4)
    view = ElasticRun([job(1, epochs=1e6), job(2, epochs=12000 * 3)], DRF(), cl, LinearSpeeds()).view()
    for j in view.jobs:
        j.progress = {1: 1e5, 2: 24000}[j.job_id]  # job 2: a third left; job 1: 90 % left
    a = SRTF().allocate(view).allocations
    assert a[2].workers == 4 and 1 not in a


def test_optimus_oracle_adds_the_task_with_the_largest_cut():
    class PSBound:
        batch_size = {"m": 32}

        def speed(self, model, p, w):  # more PS help, more workers do not
            return 10.0 * p if w > 0 else 0.0

    cl = ElasticCluster(nodes=4, max_tasks=3)
    view = ElasticRun([job(1, epochs=1e6, worker=(1, 0), ps=(1, 0))], DRF(), cl, PSBound()).view()
    a = OptimusOracle(PSBound()).allocate(view).allocations[1]
    assert (a.ps, a.workers) == (3, 1)


# ----- on DL2's data -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dl2():
    from lucidd.elastic import data

    return data.load(DL2)


@needs_dl2
def test_speed_table_interpolates_through_the_measured_points(dl2):
    speeds, consts, _ = dl2
    assert len(speeds.models) == 8 and set(consts.models) == set(speeds.models)
    for model, pts in speeds.points.items():
        for (p, w), v in list(pts.items())[:20]:
            assert speeds.speed(model, p, w) == pytest.approx(v, abs=1e-6)
    assert speeds.speed("resnet-50", 0, 3) == 0.0


@needs_dl2
def test_workload_follows_dl2s_generator(dl2):
    from lucidd.elastic.workload import WorkloadConfig, generate

    speeds, consts, _ = dl2
    traces = generate(consts, speeds, WorkloadConfig(), seed=9973, n_traces=3)
    assert [len(t) for t in traces] == [60, 60, 60]
    for t in traces:
        per_slot = np.bincount([j.arrival_slot for j in t])
        assert per_slot.max() <= 3
        for j in t:
            assert j.num_epochs == int(consts.epoch_fractions[j.jtype] * 30000)
    assert traces[0] != traces[1]
    assert generate(consts, speeds, WorkloadConfig(), seed=9973, n_traces=1)[0] == traces[0]
    pois = generate(consts, speeds, WorkloadConfig(arrivals="poisson"), seed=1, n_traces=1)[0]
    assert len(pois) == 60


@needs_dl2
def test_heuristics_reproduce_dl2s_simulator(dl2):
    """Average JCT (slots) of the first trace of seed 9973 on 96 nodes, as DL2's own *_env.py
    compute them (run under Python 3, ties between jobs by job id): DRF 44.864, Optimus 31.578,
    SRTF 78.9, FIFO 79.4, Tetris 194.482 (docs/elastic.md)."""
    from lucidd.elastic.workload import WorkloadConfig, generate

    speeds, consts, _ = dl2
    trace = generate(consts, speeds, WorkloadConfig(), seed=9973, n_traces=1)[0]
    cl = ElasticCluster(nodes=96)
    for pol, want in ((DRF(), 44.864), (OptimusOracle(speeds), 31.578), (SRTF(), 78.9), (FIFO(), 79.4)):
        assert simulate_elastic(trace, pol, cl, speeds).avg_jct_slots() == pytest.approx(want, abs=6e-4), pol.name


@needs_dl2
@pytest.mark.slow
def test_tetris_reproduces_dl2s_simulator(dl2):
    from lucidd.elastic.workload import WorkloadConfig, generate

    speeds, consts, _ = dl2
    trace = generate(consts, speeds, WorkloadConfig(), seed=9973, n_traces=1)[0]
    assert simulate_elastic(trace, Tetris(), ElasticCluster(nodes=96), speeds).avg_jct_slots() == \
        pytest.approx(194.482, abs=6e-4)
