from lucidd.jobs import Job
from lucidd.policies.base import ClusterView, SchedulingView, Share, Start
from orchestrator.policy import LucidConfig, LucidPolicy


_SEQ = iter(range(10**6))


def job(i, gpus, est, score=0, submit=0):
    j = Job(i, "a", gpus, submit, int(est), next(_SEQ), profile={"gmem": 3000})
    j.estimate, j.share_score = float(est), score
    return j


def view(pending, running=(), free=(8,), now=100, forecast=10.0):
    pending = sorted(pending, key=LucidPolicy.pending_key)
    return SchedulingView(now=now, pending=pending, running=list(running), cluster=ClusterView("a", 8, list(free)),
                          context={"forecast": forecast})


def test_orders_by_estimate_times_gpus():
    long1, short8 = job("long1", 1, 5000), job("short8", 8, 100)
    d = LucidPolicy(LucidConfig(packing=False)).schedule(view([long1, short8]))
    assert [x.job.job_id for x in d] == ["short8"]  # 800 < 5000, and then nothing fits


def test_packs_onto_running_job_when_full():
    running = job("r", 1, 1000, score=0)
    running.status, running.alloc, running.start_time = "running", ((0, (0,)),), 0
    d = LucidPolicy().schedule(view([job("q", 1, 500, score=1)], running=[running], free=(0,)))
    assert isinstance(d[0], Share) and d[0].partner is running and "GSS" in d[0].reason


def test_no_packing_when_demand_low():
    running = job("r", 1, 1000)
    running.status, running.alloc, running.start_time = "running", ((0, (0,)),), 0
    d = LucidPolicy().schedule(view([job("q", 1, 500)], running=[running], free=(0,), forecast=0.5))
    assert d == []


def test_starving_job_reserves_gpus():
    big = job("big", 8, 10_000, submit=0)
    small = job("small", 4, 10_000, submit=10)  # would run long past the big job's start
    running = job("r", 4, 100)
    running.status, running.alloc, running.start_time = "running", ((0, (0, 1, 2, 3)),), 0
    cfg = LucidConfig(packing=False, starvation_s=50)
    d = LucidPolicy(cfg).schedule(view([big, small], running=[running], free=(4,), now=100))
    assert d == []  # small would delay big, which is due when `r` ends
    quick = job("quick", 4, 1)
    d = LucidPolicy(cfg).schedule(view([big, quick], running=[running], free=(4,), now=100))
    assert [type(x) for x in d] == [Start] and d[0].job is quick  # backfills: ends before big's start


def test_only_the_longest_waiting_starving_job_jumps_the_queue():
    oldest = job("oldest", 2, 9_000, submit=0)
    old_long = job("old_long", 2, 8_000, submit=10)
    young_short = job("young_short", 2, 10, submit=90)
    cfg = LucidConfig(packing=False, starvation_s=50)
    d = LucidPolicy(cfg).schedule(view([oldest, old_long, young_short], free=(4,), now=100))
    # `oldest` is guarded; `old_long` is starving too but keeps its estimate rank behind `young_short`
    assert [x.job.job_id for x in d] == ["oldest", "young_short"]
    d = LucidPolicy(LucidConfig(packing=False, starvation_s=50, guard_one=False)).schedule(
        view([oldest, old_long, young_short], free=(4,), now=100))
    assert [x.job.job_id for x in d] == ["oldest", "old_long"]


def test_unpackable_queued_job_is_refused_without_scanning_running_jobs():
    from binder.pairing import BinderConfig, find_partner

    def must_not_iterate():
        raise AssertionError("scanned the running jobs")
        yield

    q = job("q", 1, 100, score=None)
    partner, why = find_partner(q, must_not_iterate(), BinderConfig())
    assert partner is None and "no packing class" in why
