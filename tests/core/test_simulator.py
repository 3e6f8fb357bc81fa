"""Behaviour of the event-driven engine and the baseline policies.

The strongest check here compares the engine with a straightforward one-second-step loop
written from the artifact's description (the reference semantics) on random small traces.
"""

import random

import pandas as pd
import pytest

from lucidd.cluster import ClusterSpec, VCSpec, place_consolidated
from lucidd.policies.baselines import BASELINES
from lucidd.simulator import SimulationError, jobs_from_frame, simulate


def frame(rows):
    df = pd.DataFrame(rows, columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"] = "a"
    df["seq"] = range(len(df))
    return df


def run(policy, rows, nodes=1, gpn=8):
    spec = ClusterSpec({"a": VCSpec("a", nodes, gpn)})
    jobs = jobs_from_frame(frame(rows))
    for j in jobs:
        j.estimate = j.duration
    res = simulate(jobs, spec, lambda vc: BASELINES[policy]())
    return res.jobs.set_index("job_id")


def test_fifo_keeps_strict_order():
    r = run("fifo", [("A", 8, 0, 100), ("B", 8, 1, 100), ("C", 1, 2, 10)])
    assert list(r.start_time) == [0, 100, 200]  # C waits behind B although a GPU... none is free
    r = run("fifo", [("A", 4, 0, 100), ("B", 8, 1, 100), ("C", 1, 2, 10)])
    assert r.loc["C", "start_time"] == 200  # no backfill: C could fit beside A but B is first


def test_sjf_prefers_short_jobs():
    r = run("sjf", [("A", 8, 0, 100), ("long", 8, 1, 500), ("short", 8, 2, 5)])
    assert r.loc["short", "start_time"] == 100 and r.loc["long", "start_time"] == 105


def test_srtf_preempts_with_overhead():
    r = run("srtf", [("A", 8, 0, 1000), ("B", 8, 5, 10)])
    assert r.loc["B", "start_time"] == 5 and r.loc["B", "end_time"] == 16  # released one tick late
    assert r.loc["A", "preemptions"] == 1
    # A ran 5 s, lost 40 s to the restart, resumed at 16 with 995 + 40 left
    assert r.loc["A", "end_time"] == 16 + 1035 + 1
    assert r.loc["A", "queue_s"] == 11


def test_tiresias_decides_every_minute():
    r = run("tiresias", [("A", 1, 5, 30)])
    assert r.loc["A", "start_time"] == 60 and r.loc["A", "queue_s"] == 55


def test_tiresias_demotes_after_threshold():
    # A (8 GPUs) crosses 18,000 GPU-s after 2,250 s and drops to the low queue; B, submitted
    # later but with no service yet, then outranks it and preempts it at the next minute.
    r = run("tiresias", [("A", 8, 0, 5000), ("B", 8, 100, 50)])
    assert r.loc["B", "start_time"] == 2280 and r.loc["A", "preemptions"] == 1


def test_stuck_job_is_an_error_not_a_hang():
    spec = ClusterSpec({"a": VCSpec("a", 1, 8)})
    jobs = jobs_from_frame(frame([("big", 16, 0, 10)]))
    with pytest.raises(SimulationError, match="never start"):
        simulate(jobs, spec, lambda vc: BASELINES["fifo"]())


# ---------------------------------------------------------------------------------------------
# Reference: the artifact's one-second loop, written plainly (slow but obviously faithful).

def per_second(policy, rows, nodes, gpn=8):
    free = [gpn] * nodes
    jobs = [dict(id=i, gpu=g, submit=s, dur=d, remain=d, prio=0, status=None, start=None, end=None,
                 queue=0, ckpt=0, ckpt_t=None, alloc=None, seq=k) for k, (i, g, s, d) in enumerate(rows)]
    jobs.sort(key=lambda j: (j["submit"], j["seq"]))
    que, run_l, done, t, idx = [], [], 0, min(j["submit"] for j in jobs), 0

    def place(j):
        lay = place_consolidated(free, j["gpu"], gpn)
        if lay is None:
            return False
        for n, c in lay:
            free[n] -= c
        j["alloc"] = lay
        return True

    def release(j):
        for n, c in j["alloc"]:
            free[n] += c

    while done < len(jobs):
        for j in list(run_l):
            if policy in ("fifo", "sjf"):
                if t == j["end"]:
                    release(j); run_l.remove(j); done += 1
            else:
                if j["remain"] == 0:
                    j["end"] = t; release(j); run_l.remove(j); done += 1
                else:
                    j["remain"] -= 1
                    j["prio"] += j["gpu"]
        while idx < len(jobs) and jobs[idx]["submit"] == t:
            jobs[idx]["status"] = "pend"; jobs[idx]["prio"] = 0; que.append(jobs[idx]); idx += 1
        if policy in ("fifo", "sjf"):
            que.sort(key=lambda j: j["submit"] if policy == "fifo" else j["dur"])
            for j in list(que):
                if not place(j):
                    break
                j["start"] = t; j["end"] = t + j["dur"]; que.remove(j); run_l.append(j)
        elif policy == "srtf" or t % 60 == 0:
            if policy == "srtf":
                cur = sorted(que + run_l, key=lambda j: j["remain"])
            else:
                cur = run_l + que
                hi = sorted([j for j in cur if j["prio"] <= 18000], key=lambda j: j["submit"])
                lo = sorted([j for j in cur if j["prio"] > 18000], key=lambda j: j["submit"])
                cur = hi + lo
            quota, pre, prerun = nodes * gpn, [], []
            for j in cur:
                if j["gpu"] <= quota:
                    quota -= j["gpu"]
                    if j["status"] == "pend":
                        prerun.append(j)
                elif j["status"] == "run":
                    pre.append(j)
            for j in pre:
                j["ckpt"] += 1; j["ckpt_t"] = t; j["status"] = "pend"
                j["remain"] += 40 if j["gpu"] <= 8 else 60
                release(j); que.append(j); run_l.remove(j)
            for j in prerun:
                if place(j):
                    j["status"] = "run"
                    if j["ckpt"] == 0:
                        j["start"] = t; j["queue"] = t - j["submit"]
                    else:
                        j["queue"] += t - j["ckpt_t"]
                    que.remove(j); run_l.append(j)
        t += 1
    return {j["id"]: (j["start"], j["end"]) for j in jobs}


@pytest.mark.parametrize("policy", ["fifo", "sjf", "srtf", "tiresias"])
@pytest.mark.parametrize("seed", range(6))
def test_event_driven_equals_one_second_loop(policy, seed):
    rng = random.Random(seed)
    rows, t = [], 0
    for k in range(40):
        t += rng.choice([0, 0, 1, 3, 7, 20, 45, 90])
        rows.append((f"j{k}", rng.choice([1, 1, 1, 2, 4, 8, 12, 16]), t, rng.choice([1, 2, 5, 30, 61, 200, 900])))
    want = per_second(policy, rows, nodes=3)
    got = run(policy, rows, nodes=3)
    for job_id, (start, end) in want.items():
        assert (got.loc[job_id, "start_time"], got.loc[job_id, "end_time"]) == (start, end), job_id
