from binder.pairing import BinderConfig, PackingSwitch, pick_partner, sharing_blocker, should_evict
from binder.speeds import PairSpeeds, estimated_pair_speed
from lucidd.jobs import Job


def job(i, gpus=1, score=0, gmem=4000, est=100.0, alloc=((0, (0,)),)):
    j = Job(i, "a", gpus, 0, 100, int(i), profile={"gmem": gmem, "gpu_util": 40})
    j.share_score, j.estimate, j.alloc = score, est, alloc
    return j


CFG = BinderConfig()


def test_compatible_pair_shares():
    assert sharing_blocker(job(1), job(2, score=2), CFG) is None


def test_rules_each_block():
    assert "GSS" in sharing_blocker(job(1, score=1), job(2, score=2), CFG)
    assert "GPU counts" in sharing_blocker(job(1, gpus=2), job(2), CFG)
    assert "memory" in sharing_blocker(job(1, gmem=15000), job(2, gmem=12000), CFG)
    assert "distributed" in sharing_blocker(job(1, gpus=16), job(2, gpus=16, alloc=((0, tuple(range(8))), (1, tuple(range(8))))), CFG)
    assert "not profiled" in sharing_blocker(job(1, score=None), job(2), CFG)
    busy = job(2)
    busy.partner = job(3)
    assert "already shares" in sharing_blocker(job(1), busy, CFG)
    assert "longer" in sharing_blocker(job(1, est=1000), job(2, est=10), CFG)
    assert sharing_blocker(job(1, score=1), job(2, score=1), CFG, gss=1) is not None


def test_pick_partner_first_in_start_order():
    a, b = job(2, score=2), job(3, score=0)
    assert pick_partner(job(1, score=0), [a, b], CFG) is a
    assert pick_partner(job(1, score=1), [a, b], CFG) is b


def test_switch_gss_from_forecast():
    s = PackingSwitch(high_arrivals=6, low_arrivals=2)
    assert s.gss(10, queued=5, cfg=CFG) == 2
    assert s.gss(4, queued=5, cfg=CFG) == 1
    assert s.gss(1, queued=5, cfg=CFG) == -1
    assert s.gss(10, queued=0, cfg=CFG) == -1


def test_evict_on_unstable_utilisation():
    assert not should_evict([50, 52, 49, 51, 50, 50])
    assert should_evict([90, 5, 95, 2, 88, 3])
    assert not should_evict([90, 5])  # too few samples to judge


def test_speeds_measured_or_estimated():
    import pandas as pd

    table = pd.DataFrame([dict(model1="A", dataset1="d", batchsize1=32, amp1=0, speed1=0.8,
                               model2="B", dataset2="d", batchsize2=32, amp2=1, speed2=1.2)])
    speeds = PairSpeeds(table)
    a = job(1); a.profile = dict(model="A", dataset="d", batchsize=32, amp=0, gpu_util=50)
    b = job(2); b.profile = dict(model="B", dataset="d", batchsize=32, amp=1, gpu_util=50)
    assert speeds(a, b) == (0.8, 1.0)  # measured; above 1 capped
    assert speeds(b, a) == (1.0, 0.8)
    c = job(3); c.profile = dict(model="C", dataset="d", batchsize=8, amp=0, gpu_util=90)
    sa, sc = speeds(a, c)
    assert 0.3 <= sa < 1 and 0.3 <= sc < 1 and speeds.used_estimate == 1
    assert estimated_pair_speed(20, 30) == (0.97, 0.97)


def test_time_slicings_estimate_is_what_two_trainings_kept_on_an_h200():
    from binder.speeds import time_sliced_pair_speed

    # ResNet-18 pairs at 24.5 % and 53 % kept 0.80 and 0.65 (bench/nvml_on_gpu.py, docs/deploy.md)
    assert [round(x, 2) for x in time_sliced_pair_speed(24.5, 24.5)] == [0.80, 0.80]
    assert [round(x, 2) for x in time_sliced_pair_speed(53, 53)] == [0.65, 0.65]
    a, b = time_sliced_pair_speed(5, 90)  # the light job loses most: its partner holds the GPU
    assert a < b
    assert time_sliced_pair_speed(None, 20) == (0.75, 0.75)
