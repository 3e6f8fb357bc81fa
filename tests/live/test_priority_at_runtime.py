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
