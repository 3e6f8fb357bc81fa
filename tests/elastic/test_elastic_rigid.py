"""Rigid shapes: the dl2 jobs with a fixed shape, on the slot engine and the event-driven simulator."""

import pytest

from lucidd.elastic.engine import ElasticCluster, simulate_elastic
from lucidd.elastic.rigid import RigidFIFO, event_trace, rigid_shapes, run_event_policies
from lucidd.elastic.workload import ElasticJob
from tests.conftest import SHARED

DL2 = SHARED / "dl2"
needs_dl2 = pytest.mark.skipif(not (DL2 / "config_speed.txt").is_file(), reason=f"needs DL2's data in {DL2}")


class Speeds:
    batch_size = {"a": 32, "b": 32}

    def speed(self, model, p, w):
        k = min(p, w)
        if k <= 0:
            return 0.0
        return {"a": [10, 19, 20, 20], "b": [10, 11, 12, 12]}[model][min(k, 4) - 1]


def spec(jid, model, arrival, epochs):
    return ElasticJob(jid, 0, model, arrival, float(epochs), 1, (2, 4), (2, 0), 32, (1e-3, 1.0, 0.1))


def test_shape_is_the_smallest_bundle_count_within_90_percent_of_the_fastest():
    assert rigid_shapes(Speeds(), ["a", "b"], max_tasks=4) == {"a": 2, "b": 2}
    assert rigid_shapes(Speeds(), ["a", "b"], max_tasks=4, efficiency=0.99) == {"a": 3, "b": 3}


def test_rigid_fifo_keeps_shapes_and_strict_order():
    shapes = {"a": 2, "b": 1}
    jobs = [spec(1, "a", 0, 19 * 1200 * 2), spec(2, "a", 0, 100), spec(3, "b", 0, 100)]
    cl = ElasticCluster(nodes=1, max_tasks=4)  # room for 2 bundles
    run = simulate_elastic(jobs, RigidFIFO(shapes), cl, Speeds())
    j1, j2, j3 = run.jobs()
    assert (j1.start_time, j1.end_time) == (0, 2400)
    assert j2.start_time == 2400 and j3.start_time == 3600  # job 2 holds the node for its slot; 3 waits
    assert j1.preemptions == 0 and j1.attrs["avg_ps"] == 2 and j1.attrs["avg_workers"] == 2


def test_event_trace_has_the_canonical_columns():
    shapes = {"a": 2, "b": 1}
    lt = event_trace([spec(1, "a", 2, 1000), spec(2, "b", 0, 1000)], shapes, Speeds(), 1200.0)
    df = lt.jobs
    assert list(df.job_id) == ["2", "1"] and list(df.gpu_num) == [1, 2]
    assert list(df.submit_time) == [0, 2400] and list(df.duration) == [100, 53]


@needs_dl2
def test_slot_engine_and_event_simulator_agree_on_rigid_fifo():
    from lucidd.elastic.experiment import make_elastic_experiment

    exp = make_elastic_experiment(DL2, nodes=24, seed=9973, n_traces=1)
    res = run_event_policies(exp.traces[0], exp.shapes, exp.speeds, exp.cluster, policies=("fifo", "tiresias"))
    ev = res["fifo"].jobs["jct_s"].mean() / exp.cluster.slot_s
    slot = exp.run("rigid-fifo").avg_jct_slots()
    # the slot engine starts jobs only at slot boundaries; the event simulator at once
    assert slot == pytest.approx(ev, rel=0.03)
    assert res["tiresias"].jobs["jct_s"].mean() > 0
