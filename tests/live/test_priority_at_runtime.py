"""Slurm's priority settings changed while lucidd runs (a review on a real 22.05 test cluster,
3 December 2026): slurmctld restarted with PriorityType=priority/basic ignores every SiteFactor
lucidd writes, and the check at lucidd's start had found nothing to say."""

from __future__ import annotations

import json
import logging

from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import PREEMPT_TYPE_RECHECK_S, Reconciler
from lucidd.live.store import Store
from orchestrator.live import LucidDecider

from .memslurm import Clock, MemSlurm


def test_priority_type_changed_while_lucidd_runs_is_said_and_cleared(tmp_path, caplog):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}})
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.config = {"PriorityType": "priority/multifactor", "PreemptType": "preempt/none"}
    store = Store(cfg.database.url).create()
    store.set_meta("slurm_warnings", json.dumps(["bf_window is 1 day, shorter ..."]))  # from lucidd's start
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)

    def cycle():
        clock.t += 10
        assert rec.cycle().ok

    with caplog.at_level(logging.WARNING):
        cycle()
    assert not [r for r in caplog.records if "PriorityType" in r.getMessage()]
    # the admin restarts slurmctld with priority/basic; lucidd reads the config again within the recheck
    slurm.config = {"PriorityType": "priority/basic", "PreemptType": "preempt/none"}
    with caplog.at_level(logging.WARNING):
        for _ in range(PREEMPT_TYPE_RECHECK_S // 10 + 1):
            cycle()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "PriorityType" in r.getMessage()]
    assert len(said) == 1 and "Slurm ignores SiteFactor" in said[0]  # once, not every cycle
    warnings = json.loads(store.get_meta("slurm_warnings"))
    assert warnings[0].startswith("bf_window") and warnings[1].startswith("PriorityType=priority/basic")
    # back to multifactor: the warning goes
    slurm.config = {"PriorityType": "priority/multifactor", "PreemptType": "preempt/none"}
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(PREEMPT_TYPE_RECHECK_S // 10 + 1):
            cycle()
    assert json.loads(store.get_meta("slurm_warnings")) == warnings[:1]
    assert any("SiteFactor again" in r.getMessage() for r in caplog.records)


def _pending_in_main(tmp_path, n=2, **kw):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}})
    clock = Clock()
    slurm = MemSlurm(clock)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    for jid in range(1, n + 1):
        slurm.submit(jid, gpus=jid, comment="lucid:noprofile", **kw)  # straight to main, ordered there

    def cycle(must_be_ok=True):
        clock.t += 10
        ok = rec.cycle().ok
        assert ok or not must_be_ok

    cycle()
    cycle()
    assert all(slurm.jobs[j].partition == "main" and store.job(j).site_factor for j in range(1, n + 1))
    return slurm, store, cycle


def test_a_job_pinned_by_hand_is_said_once_and_named_in_its_order_reason(tmp_path, caplog):
    """`scontrol update jobid=N priority=5` (a review on the test cluster): Slurm kept the job last
    while `lucidctl queue` and `explain` showed it at its rank with lucidd's SiteFactor, and
    lucidd said nothing."""
    slurm, store, cycle = _pending_in_main(tmp_path)
    reason = store.job(2).order_reason
    slurm.pinned[2] = 5
    caplog.clear()
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            cycle()
    rewrites = [c for c in slurm.job_calls(2) if c[0] == "sitefactor"]
    assert len(rewrites) == 2  # lucidd's own, and once more when it saw the pin: never per cycle
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "job 2:" in r.getMessage()]
    assert len(said) == 2 and "sets the SiteFactor once more" in said[0] and "pinned by hand" in said[1]
    r = store.job(2)
    assert r.order_reason.startswith("pinned by hand at priority 5") and "scontrol hold 2; scontrol release 2" in r.order_reason
    assert store.job(1).order_reason and not store.job(1).order_reason.startswith("pinned")
    # `scontrol hold 2; scontrol release 2`: Slurm computes its priority again
    slurm.jobs[2].priority = 0
    cycle()
    del slurm.pinned[2]
    slurm.jobs[2].priority = 1
    caplog.clear()
    with caplog.at_level(logging.INFO):
        cycle()
    assert store.job(2).order_reason == reason
    assert any("back in lucidd's order" in r.getMessage() for r in caplog.records)


def test_a_site_factor_changed_by_hand_is_set_again_once(tmp_path, caplog):
    """`scontrol update jobid=N sitefactor=0` by hand: the job's priority 1 is below lucidd's
    SiteFactor; lucidd writes its own once more, and the job is back in the order with no note."""
    slurm, store, cycle = _pending_in_main(tmp_path)
    reason = store.job(2).order_reason
    slurm.site_factors[2] = 0
    with caplog.at_level(logging.INFO):
        for _ in range(4):
            cycle()
    assert slurm.site_factors[2] == store.job(2).site_factor
    assert store.job(2).order_reason == reason
    assert len([c for c in slurm.job_calls(2) if c[0] == "sitefactor"]) == 2


def test_a_niced_job_is_not_taken_for_a_pinned_one(tmp_path, caplog):
    slurm, store, cycle = _pending_in_main(tmp_path)
    slurm.jobs[2].nice = 1000  # `sbatch --nice=1000`: Slurm subtracts it
    caplog.clear()
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            cycle()
    assert not [r for r in caplog.records if "job 2" in r.getMessage() and "SiteFactor" in r.getMessage()]
    assert len([c for c in slurm.job_calls(2) if c[0] == "sitefactor"]) == 1


def test_a_pinned_job_is_said_once_after_a_restart_of_lucidd(tmp_path, caplog):
    slurm, store, cycle = _pending_in_main(tmp_path)
    slurm.pinned[2] = 5
    for _ in range(3):
        cycle()
    assert store.job(2).order_reason.startswith("pinned by hand")
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}})
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=slurm.clock, monotonic=slurm.clock)  # restarted
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(6):
            slurm.clock.t += 10
            assert rec.cycle().ok
    said = [r.getMessage() for r in caplog.records if "job 2:" in r.getMessage()]
    assert len(said) == 2, said  # the rewrite, and the note: once each, not every cycle


def test_a_rewrite_that_times_out_costs_the_cycle_nothing_and_is_tried_again(tmp_path):
    slurm, store, cycle = _pending_in_main(tmp_path)
    slurm.pinned[2] = 5
    slurm.fail[("sitefactor", 2)] = ("scontrol: timed out", True, False)
    cycle()  # (asserts the cycle is ok)
    cycle()
    assert len([c for c in slurm.job_calls(2) if c[0] == "sitefactor"]) == 3  # lucidd's, the failed one, again


def test_a_lowered_site_factor_whose_answer_was_lost_is_no_pin(tmp_path, caplog):
    """lucidd lowers a job's SiteFactor (its limit raised: a longer estimate); the call times out
    after Slurm took it, so Slurm lists the new value, below the recorded one. That was called a
    pin, and the old value was written back before the new one (a review)."""
    slurm, store, cycle = _pending_in_main(tmp_path, time_limit_s=600)  # estimates capped at 10 minutes
    old = store.job(2).site_factor
    slurm.jobs[2].time_limit_s = 3 * 86400  # the estimate back to the hour: a lower one
    slurm.fail[("sitefactor", 2)] = ("scontrol: timed out", True, True)
    written = []
    set_site_factor = slurm.set_site_factor

    def recording(job_ids, value):
        written.extend((j, value) for j in job_ids)
        set_site_factor(job_ids, value)

    slurm.set_site_factor = recording
    caplog.clear()
    with caplog.at_level(logging.INFO):
        for _ in range(4):
            cycle(must_be_ok=False)  # (the timed-out call skips its cycle, as any Slurm timeout)
    assert not [r for r in caplog.records if "pinned" in r.getMessage() or "below the SiteFactor" in r.getMessage()]
    assert slurm.site_factors[2] == store.job(2).site_factor < old
    assert (2, old) not in written and written.count((2, store.job(2).site_factor)) >= 1, written


def test_rewrites_that_time_out_cost_one_timeout_a_cycle(tmp_path):
    """Four pinned jobs and a slurmctld that times out: each rewrite was tried in one cycle, one
    timeout each, past lucidd-failopen's 60 s and towards systemd's watchdog (a review)."""
    slurm, store, cycle = _pending_in_main(tmp_path, n=4)
    for jid in (1, 2, 3, 4):
        slurm.pinned[jid] = 5
        slurm.fail[("sitefactor", jid)] = ("scontrol: timed out", True, False)
    before = len([c for c in slurm.calls if c[0] == "sitefactor"])
    cycle()
    assert len([c for c in slurm.calls if c[0] == "sitefactor"]) == before + 1  # one try, then the next cycle
    for _ in range(6):
        cycle()
    assert all(store.job(j).order_reason.startswith("pinned by hand") for j in (1, 2, 3, 4))
