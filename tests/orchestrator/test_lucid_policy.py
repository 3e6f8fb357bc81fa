from lucidd.jobs import Job
from lucidd.policies.base import ClusterView, SchedulingView, Share, Start
from orchestrator.policy import LucidConfig, LucidPolicy


_SEQ = iter(range(10**6))


def job(i, gpus, est, score=0, submit=0):
    j = Job(i, "a", gpus, submit, int(est), next(_SEQ), profile={"gmem": 3000})
    j.estimate, j.share_score = float(est), score
    return j


def view(pending, running=(), free=(8,), now=100, forecast=10.0):
    pending = sorted(pending, key=LucidPolicy().pending_key)
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
    running = job("r", 4, 1000)  # started at 0, due to end at 1000
    running.status, running.alloc, running.start_time = "running", ((0, (0, 1, 2, 3)),), 0
    cfg = LucidConfig(packing=False, starvation_s=50)
    d = LucidPolicy(cfg).schedule(view([big, small], running=[running], free=(4,), now=100))
    assert d == []  # small would delay big, which is due when `r` ends
    quick = job("quick", 4, 1)
    d = LucidPolicy(cfg).schedule(view([big, quick], running=[running], free=(4,), now=100))
    assert [type(x) for x in d] == [Start] and d[0].job is quick  # backfills: ends before big's start


def _running(j, gpus_idx, start=0):
    j.status, j.alloc, j.start_time = "running", ((0, tuple(gpus_idx)),), start
    return j


def test_no_packing_chain_past_a_reservation():
    # A packed job that outlives its partner keeps the shared GPUs busy; while a starving job
    # waits for them, only a job that ends before the reserved start may pack (Venus had 8-GPU
    # jobs waiting 15 days behind such chains).
    big = job("big", 8, 10_000, submit=0)
    r = _running(job("r", 4, 1000), range(4))  # due to end at 1000: `big`'s reserved start
    cfg = LucidConfig(starvation_s=50)
    # `long` passes every binder rule (1500 <= 2 x 1000) but would end at 1600, after 1000
    d = LucidPolicy(cfg).schedule(view([big, job("long", 4, 1500, submit=10)], running=[r], free=(4,), now=100))
    assert d == []
    d = LucidPolicy(cfg).schedule(view([big, job("short", 4, 10, submit=10)], running=[r], free=(4,), now=100))
    assert len(d) == 1 and isinstance(d[0], Share) and d[0].job.job_id == "short"  # ends before 1000


def test_drain_after_backfill_grace():
    # Estimates can be far too short, so backfilled jobs may keep pushing the reservation back;
    # once the starving job is `backfill_grace_s` past the threshold, nothing else starts.
    big = job("big", 8, 10_000, submit=0)
    r = _running(job("r", 4, 100_000), range(4))
    quick = job("quick", 4, 1, submit=10)
    cfg = LucidConfig(packing=False, starvation_s=50, backfill_grace_s=1000)
    assert [x.job.job_id for x in LucidPolicy(cfg).schedule(view([big, quick], running=[r], free=(4,), now=100))] == ["quick"]
    assert LucidPolicy(cfg).schedule(view([big, quick], running=[r], free=(4,), now=2000)) == []


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


def test_runs_alone_when_nobody_needs_the_free_gpus():
    # Sharing slows both jobs: with free GPUs for every queued job and no multi-node job
    # around, a job that fits starts exclusively even though a partner is available.
    r = _running(job("r", 1, 1000), [0])
    d = LucidPolicy().schedule(view([job("q", 1, 500)], running=[r], free=(7,)))
    assert [type(x) for x in d] == [Start] and "no other job needed them" in d[0].reason
    # The artifact's always-pack-first is still available.
    d = LucidPolicy(LucidConfig(lazy_pack_first=False)).schedule(view([job("q", 1, 500)], running=[r], free=(7,)))
    assert [type(x) for x in d] == [Share]


def test_packs_first_while_a_queued_job_cannot_start():
    # `q` fits on the one free GPU, but `wide` (4 GPUs) cannot start: q packs, keeping the GPU.
    r = _running(job("r", 1, 1000), [0])
    q, wide = job("q", 1, 500), job("wide", 4, 600)
    d = LucidPolicy().schedule(view([q, wide], running=[r], free=(1,)))
    assert [type(x) for x in d] == [Share] and d[0].job is q
    assert "free GPUs kept: job wide (4 GPU(s)) cannot start" in d[0].reason


def test_packs_first_while_a_multi_node_job_runs():
    # Multi-node jobs never share; packing the small ones keeps whole nodes free for them.
    r = _running(job("r", 1, 1000), [0])
    big = job("big", 16, 1000)
    big.status, big.alloc, big.start_time = "running", ((1, tuple(range(8))), (2, tuple(range(8)))), 0
    d = LucidPolicy().schedule(view([job("q", 1, 500)], running=[r, big], free=(7, 0, 0, 8)))
    assert [type(x) for x in d] == [Share] and "multi-node job big" in d[0].reason


def test_aging_lets_a_long_waiting_large_job_overtake_new_small_ones():
    # 8 GPUs x 10,000 s is 80x a fresh 1 GPU x 1,000 s job: past log2(80) = 6.3 half-lives of
    # waiting the old job ranks first; without aging it never does.
    old_big = job("old_big", 8, 10_000, submit=0)
    hour = 3600
    for waited_h, first in ((5, "new_small"), (7, "old_big")):
        new_small = job("new_small", 1, 1_000, submit=waited_h * hour)
        aged = sorted([new_small, old_big], key=LucidPolicy(LucidConfig(aging_halflife_s=hour)).pending_key)
        assert aged[0].job_id == first
        unaged = sorted([new_small, old_big], key=LucidPolicy(LucidConfig(aging_halflife_s=0)).pending_key)
        assert unaged[0].job_id == "new_small"


def test_aged_key_orders_as_halving_per_halflife_at_any_instant():
    import random

    rng = random.Random(3)
    halflife = 5_000
    policy = LucidPolicy(LucidConfig(aging_halflife_s=halflife))
    jobs = [job(i, rng.choice([1, 2, 4, 8]), rng.randint(1, 10**5), submit=rng.randint(0, 50_000)) for i in range(200)]
    by_key = [j.job_id for j in sorted(jobs, key=policy.pending_key)]
    for now in (50_000, 80_000, 200_000):  # the order never needs re-sorting as time passes
        aged = sorted(jobs, key=lambda j: (j.estimate * j.gpu_num * 2 ** (-(now - j.submit_time) / halflife), j.seq))
        assert [j.job_id for j in aged] == by_key


def test_aging_counts_the_wait_from_the_original_submission():
    # a job requeued from the profiler keeps its first submission time (attrs["submitted"])
    requeued = job("requeued", 1, 3_000, submit=7_200)
    requeued.attrs["submitted"] = 0
    fresh = job("fresh", 1, 1_000, submit=7_200)
    key = LucidPolicy(LucidConfig(aging_halflife_s=3600)).pending_key
    assert sorted([fresh, requeued], key=key)[0].job_id == "requeued"  # waited 2 h: 3,000 / 4 < 1,000


def test_priority_text_of_a_job_without_gpus_says_why_it_is_first():
    """It read "priority 1 GPU-s = estimate x GPUs (estimate 5 s)" for a 0-GPU job."""
    pol = LucidPolicy(LucidConfig())
    j = Job(1, "a", 0, 0, 5, 1)
    j.estimate = 5.0
    assert pol.priority_text(j, 100) == "priority 1 GPU-s, the least: it asks for no GPU"
    j8 = Job(2, "a", 8, 0, 5, 2)
    j8.estimate = 5.0
    assert "= estimate x GPUs" in pol.priority_text(j8, 100)


def test_an_infinite_estimate_ranks_last_with_a_finite_site_factor():
    """A model that overflows gives inf: the job ranks last, and the live SiteFactor (an int) is still
    computed (int(round(inf)) raised OverflowError at every cycle)."""
    from orchestrator.live import site_factor

    huge, small = job("huge", 1, 100), job("small", 1, 100)
    huge.estimate = float("inf")
    policy = LucidPolicy()
    assert sorted([huge, small], key=policy.pending_key) == [small, huge]
    value, starving = site_factor(policy, huge, now=200, points_per_doubling=1000)
    assert not starving and 2 <= value < site_factor(policy, small, now=200, points_per_doubling=1000)[0]
