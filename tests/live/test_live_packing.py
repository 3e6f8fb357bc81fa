"""GPU packing on the live cluster (binder/live.py, the decider's shard counts, the daemon's
apply and fail-open): unit tests on the in-memory cluster and on Slurm replies read from the test
cluster. The real mechanics (two 1-shard jobs on one GPU) are in tests/slurm/test_live_packing.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from binder.live import OWN, SHARED, LivePackingConfig, partitions_wanting_gpus, shard_decision, share_score
from lucidd.backends.base import BackendError, LiveJob, NodeGPUs
from lucidd.backends.slurm import gres_used_gpus, parse_job, sacct_rows, tres_gpus
from lucidd.errors import ConfigError
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler, open_inbox
from lucidd.live.store import Store
from orchestrator.live import LucidDecider

from .memslurm import Clock, MemSlurm

ORIG = "lucid:orig=tres_per_node=gres:gpu:1 lucid:partition=main"
CFG = LivePackingConfig(gpu_memory_mib=24576)


def prof(util=10.0, mem=2000.0, samples=5, mem_util=10.0):
    return SimpleNamespace(gpu_util=util, gmem_util=mem_util, gmem_mib=mem, util_samples=samples)


# ----- what Slurm says about jobs of shards (read off the test cluster, 28 November 2026) ----------

def test_a_job_of_shards_counts_one_gpu_and_is_packable_only_when_lua_made_it():
    rec = {"job_id": 12, "job_state": "PENDING", "partition": "main", "tres_per_node": "gres:shard:2",
           "tres_per_job": "", "tres_req_str": "cpu=1,mem=1000M,node=1,billing=1,gres/shard=2", "node_count": 1,
           "admin_comment": ORIG}
    j = parse_job(rec)
    assert (j.gpus, j.shards, j.packable) == (1, 2, True)
    assert parse_job(rec | {"tres_per_node": "gres:shard:1"}).shards == 1
    assert parse_job(rec | {"tres_per_node": "gres/shard:1"}).shards == 1  # newer Slurm's spelling
    assert parse_job(rec | {"tres_per_node": "gres/gpu:2", "tres_req_str": ""}).gpus == 2
    # a user's own shard request is never changed by lucidd
    assert not parse_job(rec | {"admin_comment": "lucid:partition=main"}).packable
    plain = parse_job(rec | {"tres_per_node": "gres:gpu:1", "tres_req_str": "cpu=1,gres/gpu=1", "admin_comment": ""})
    assert (plain.gpus, plain.shards, plain.packable) == (1, 0, False)


def test_a_nodes_used_gpus_count_the_gpus_shard_jobs_hold():
    # 4 GPUs held by gpu jobs, 2 by three shard jobs (two share g4); slurmctld counts g4's shards as 1
    used = ("gpu:g0:1(IDX:0),gpu:g1:1(IDX:1),gpu:g2:1(IDX:2),gpu:g3:1(IDX:3),gpu:g4:0(IDX:N/A),gpu:g5:0(IDX:N/A),"
            "gpu:g6:0(IDX:N/A),gpu:g7:0(IDX:N/A),shard:g0:0(IDX:N/A),shard:g1:0(IDX:N/A),shard:g2:0(IDX:N/A),"
            "shard:g3:0(IDX:N/A),shard:g4:1(IDX:4),shard:g5:1(IDX:5),shard:g6:0(IDX:N/A),shard:g7:0(IDX:N/A)")
    assert gres_used_gpus(used) == 6
    assert gres_used_gpus("gpu:2(IDX:0-1),shard:0(IDX:N/A)") == 2
    assert gres_used_gpus("gpu:a100:3") == 3  # no index lists: the count
    assert gres_used_gpus("") == 0


def test_accounting_counts_a_job_of_shards_as_one_gpu():
    shard = [{"type": "gres", "name": "shard", "count": 2}, {"type": "cpu", "count": 1}]
    assert tres_gpus(shard) == 1
    assert tres_gpus([{"type": "gres", "name": "gpu", "count": 4}]) == 4
    rows = sacct_rows({"jobs": [{"job_id": 7, "tres": {"requested": shard, "allocated": shard}, "time": {},
                                 "state": {"current": "COMPLETED"}}]})
    assert rows[0]["gpus"] == 1
    # a site whose AccountingStorageTRES tracks only typed GPUs: the live history counted 0 GPUs
    typed = [{"type": "gres", "name": "gpu:a100", "count": 2}, {"type": "gres", "name": "gpu:v100", "count": 1}]
    rows = sacct_rows({"jobs": [{"job_id": 8, "tres": {"requested": typed, "allocated": typed}, "time": {},
                                 "state": {"current": "COMPLETED"}}]})
    assert tres_gpus(typed) == 3 and rows[0]["gpus"] == 3


# ----- the pure decision --------------------------------------------------------------------------

def test_a_model_may_hold_a_job_back_but_never_admit_one_above_the_rules_band():
    class Lenient:
        def predict_one(self, util, mem_util, gmem, amp):
            return 0  # Tiny whatever the figures

    score, why = share_score(prof(util=45), CFG, Lenient())
    assert score == 1 and "packing model: Tiny" in why and "the higher class counts" in why
    assert shard_decision(SimpleNamespace(job_id=5, partition="main"), "main", prof(util=45), {"main": 9}, CFG,
                          Lenient())[0] == OWN

    class Strict:
        def predict_one(self, util, mem_util, gmem, amp):
            return 2

    assert share_score(prof(util=5), CFG, Strict())[0] == 2


def test_a_packing_model_that_fails_when_asked_gives_the_rule_not_an_error():
    """A tree that loads but fails in predict (pickled by another scikit-learn): share_score raised
    inside decide(), so every cycle failed and nothing was ordered or released (a review)."""
    class Broken:
        def predict_one(self, util, mem_util, gmem, amp):
            raise AttributeError("'DecisionTreeClassifier' object has no attribute 'monotonic_cst'")

    score, why = share_score(prof(util=45), CFG, Broken())
    assert score == 1 and "the packing model failed: AttributeError" in why
    assert shard_decision(SimpleNamespace(job_id=5, partition="main"), "main", prof(util=10), {"main": 9}, CFG,
                          Broken())[0] == SHARED


def test_the_rule_scores_by_sm_utilisation_and_a_model_takes_the_worse_amp():
    assert share_score(prof(util=10), CFG)[0] == 0
    assert share_score(prof(util=45), CFG)[0] == 1
    assert share_score(prof(util=75), CFG)[0] == 2
    assert share_score(prof(samples=1), CFG)[0] is None
    assert share_score(None, CFG)[0] is None

    class Model:
        def predict_one(self, util, mem_util, gmem, amp):
            return 1 if amp else 0

    score, why = share_score(prof(), CFG, Model())
    assert score == 1 and "higher of amp off and on" in why


def test_lazy_packing_shares_only_while_someone_waits_for_gpus():
    job = SimpleNamespace(job_id=5, partition="main")
    count, why = shard_decision(job, "main", prof(), {}, CFG)
    assert count == OWN and "nobody waits for GPUs in main" in why
    count, why = shard_decision(job, "main", prof(), {"main": 9}, CFG)
    assert count == SHARED and "job 9 waits for GPUs there" in why
    assert shard_decision(job, "main", prof(), {"main": 5}, CFG)[1].count("it waits for GPUs itself") == 1
    assert shard_decision(job, "main", prof(), {"research": 9}, CFG)[0] == OWN  # another partition's queue


@pytest.mark.parametrize("p,cfg,why", [
    (prof(util=80), LivePackingConfig(gss=2, gpu_memory_mib=24576), "could exceed GSS 2"),  # Jumbo, GSS 2
    (prof(util=45), CFG, "could exceed GSS 1"),  # Medium, the default GSS 1 (Tiny jobs only)
    (prof(mem=12000), CFG, "more than half of a GPU"),  # (24,576 - 1,024) / 2 = 11,776 MiB
    (prof(), LivePackingConfig(), "gpu_memory_mib is not set"),
    (None, CFG, "no packing class"),
])
def test_a_job_that_could_hurt_any_partner_keeps_a_gpu_of_its_own(p, cfg, why):
    count, reason = shard_decision(SimpleNamespace(job_id=5, partition="main"), "main", p, {"main": 9}, cfg)
    assert count == OWN and why in reason, reason


def test_waiting_for_gpus_is_slurms_reason_resources_or_priority():
    jobs = [LiveJob(1, partition="main", reason="Resources", gpus=8),
            LiveJob(2, partition="research", reason="Dependency", gpus=1),
            LiveJob(3, partition="research", reason="BeginTime", gpus=1),
            LiveJob(4, partition="main,research", reason="Priority", gpus=1)]
    assert partitions_wanting_gpus(jobs) == {"main": 1, "research": 4}


# ----- config -----------------------------------------------------------------------------------

def test_packing_needs_the_gpu_memory_and_a_model_that_loads(tmp_path):
    # 0 (the default): each partition's smallest GPU as the samplers report it (with_gpu_memory)
    assert config_from_dict({"packing": {"enabled": True}}).packing.gpu_memory_mib == 0
    with pytest.raises(ConfigError, match="tiny_below_util"):
        config_from_dict({"packing": {"enabled": True, "gpu_memory_mib": 24576, "tiny_below_util": 70}})
    with pytest.raises(ConfigError, match="memory_headroom_mib"):  # nothing could ever share
        config_from_dict({"packing": {"enabled": True, "gpu_memory_mib": 1000}})
    assert not config_from_dict({}).packing.enabled  # off by default
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)},
                            "packing": {"enabled": True, "gpu_memory_mib": 24576, "model": str(tmp_path / "none")}})
    with pytest.raises(ConfigError, match=r"\[packing\] model: cannot load"):
        LucidDecider(cfg)


# ----- the daemon -------------------------------------------------------------------------------

def _packing_cluster(tmp_path, packing=True, dry_run=False, gpu_memory_mib=24576):
    """(config, clock, in-memory Slurm, store, lucidd) with GPU packing on (Tprof 60 s, every cycle 10 s)."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 60, "skip_when_free": False, "lend_idle_gpus": False,
                                         "long_tprof_s": 0},
                            "packing": {"enabled": packing, "gpu_memory_mib": gpu_memory_mib}})
    clock = Clock()
    slurm = MemSlurm(clock)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock, dry_run=dry_run)
    return cfg, clock, slurm, store, rec


@pytest.fixture
def packing_cluster(tmp_path):
    return _packing_cluster(tmp_path)


def _cycles(rec, clock, seconds, step=10, check=True):
    for _ in range(int(seconds // step)):
        clock.t += step
        ok = rec.cycle().ok
        assert ok or not check


def _sampler_wrote(store, node, clock, mib=24576.0, name="FakeGPU"):
    """The heartbeat of a sampler that has read since before the runs above and written since they
    ended (Store.profile_incompleteness): without it no profile is whole, and no job shares."""
    store.save_gpu_node(node, int(clock.t), 8, mib, name, "535.183.01", flushed_at=int(clock.t) + 3600,
                        sampling_since=0)


def _profiled(slurm, store, clock, rec, job_id, util=10.0):
    """A job of shards (as job_submit.lua makes a 1-GPU request) run in profiling with figures."""
    slurm.submit(job_id, gpus=1, shards=2)
    slurm.jobs[job_id].admin_comment = ORIG
    _cycles(rec, clock, 10)
    assert slurm.jobs[job_id].partition == "profiling"
    slurm.start(job_id)
    store.create_gpu_profiles()
    store.save_gpu_profiles([SimpleNamespace(job_id=job_id, partition="profiling", node="gpu1", first_t=clock.t,
                                             last_t=clock.t + 50, samples=10, util_samples=10, gpu_util=util,
                                             gmem_util=5.0, gmem_max_mib=3000.0, gpus={0})])
    _sampler_wrote(store, "gpu1", clock)


def test_a_profiled_job_is_lowered_before_its_release_while_its_partition_waits_and_raised_after(packing_cluster):
    cfg, clock, slurm, store, rec = packing_cluster
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    _profiled(slurm, store, clock, rec, 5)
    _profiled(slurm, store, clock, rec, 6, util=90.0)  # Jumbo: keeps a GPU of its own
    _cycles(rec, clock, 80)  # Tprof: requeued, pending again (BeginTime), then released
    for jid in (5, 6):
        slurm.jobs[jid].reason = "BeginTime"
    _cycles(rec, clock, 20)
    j5, j6 = slurm.jobs[5], slurm.jobs[6]
    assert (j5.partition, j5.shards) == ("main", 1) and (j6.partition, j6.shards) == ("main", 2)
    verbs = [c[0] for c in slurm.job_calls(5)]
    assert verbs.index("shards") < len(verbs) - 1 - verbs[::-1].index("move")  # lowered before the move to main
    (act,) = [a for a in store.actions_for(5) if a.kind == "shards"]
    assert "may share a GPU" in act.reason and "job 99 waits for GPUs there" in act.reason
    assert not [a for a in store.actions_for(6) if a.kind == "shards"]
    # nobody waits any more: it waits for a GPU of its own again (lazy packing), once
    del slurm.jobs[99]
    j5.reason = "Priority"  # pending, and itself no longer counted as waiting for GPUs ...
    j5.gpus = 1
    _cycles(rec, clock, 10)
    assert j5.shards == 1  # ... it is: Priority means it waits for GPUs
    j5.reason = "None"  # as Slurm shows a job right after an update, until its next scheduling pass
    _cycles(rec, clock, 50)
    assert j5.shards == 1  # not raised at once: the partition waited for GPUs less than a minute ago
    _cycles(rec, clock, 30)
    assert j5.shards == 2
    assert [a.kind for a in store.actions_for(5)].count("shards") == 2


def test_packing_off_changes_no_shard_count(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "profiler": {"tprof_s": 60, "skip_when_free": False}})
    clock = Clock()
    slurm = MemSlurm(clock)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources")
    _profiled(slurm, store, clock, rec, 5)
    _cycles(rec, clock, 100)
    assert not [c for c in slurm.calls if c[0] == "shards"]


def test_failopen_gives_waiting_one_shard_jobs_a_gpu_of_their_own_before_releasing_any(tmp_path, monkeypatch):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}})
    slurm = MemSlurm(Clock())
    slurm.jobs[5] = LiveJob(5, partition="main", gpus=1, shards=1, admin_comment=ORIG)
    slurm.jobs[6] = LiveJob(6, partition="main", gpus=1, shards=1, state="RUNNING", admin_comment=ORIG)
    slurm.jobs[7] = LiveJob(7, partition="main", gpus=1, shards=1, admin_comment="")  # not lucidd's to change
    slurm.jobs[8] = LiveJob(8, partition="inbox", gpus=1, shards=1, admin_comment=ORIG)
    lines = open_inbox(slurm, cfg, "test")
    assert slurm.inbox_up and slurm.jobs[8].partition == "main"
    assert slurm.jobs[5].shards == 2 and slurm.jobs[8].shards == 2
    assert slurm.jobs[6].shards == 1 and slurm.jobs[7].shards == 1
    assert [c[0] for c in slurm.job_calls(8)] == ["shards", "move"]  # raised before it is released
    assert any("GPU of their own again" in line for line in lines)
    # one job that refuses (it started meanwhile) leaves the others raised, and never the inbox shut
    slurm.inbox_up = False
    slurm.jobs[5].shards = slurm.jobs[8].shards = 1
    slurm.jobs[8].partition = "main"
    real = slurm.set_shards

    def refuse_5(ids, count):
        if 5 in ids:
            raise BackendError("Job is no longer pending execution", transient=False)
        real(ids, count)

    monkeypatch.setattr(slurm, "set_shards", refuse_5)
    lines = open_inbox(slurm, cfg, "test")
    assert slurm.inbox_up and slurm.jobs[8].shards == 2 and slurm.jobs[5].shards == 1
    assert any("left to share GPUs: 5" in line for line in lines), lines


def test_a_replay_with_packing_on_says_how_it_replays_it(tmp_path):
    from lucidd.cli import _options_of_lucidd_config
    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

    path = tmp_path / "lucidd.toml"
    path.write_text("[packing]\nenabled = true\ngpu_memory_mib = 24576\n")
    exp = make_experiment(load_trace(sample_trace_path(), end=3600), vc_config=sample_vc_config_path())
    _options_of_lucidd_config(str(path), exp)
    assert any("[packing] enabled: `lucid` lowers" in n for n in exp.notes), exp.notes


# ----- from a review of the change (28 November 2026): each failed before its fix -----------------

LUA = str(Path(__file__).resolve().parents[2] / "lucidd" / "data" / "slurm" / "job_submit.lua")
STUB = r'''
slurm = {SUCCESS=0, ERROR=-1, NO_VAL=4294967294, ESLURM_ACCESS_DENIED=2002,
  log_user=function(...) end, log_info=function(...) end}
local src = io.open(arg[1]):read("*a")
src = src:gsub("local LUCIDD_PACKING = false", "local LUCIDD_PACKING = true")
assert(loadstring(src))()
local d = {min_nodes=4294967294, max_nodes=4294967294, script="#!/bin/bash\n#SBATCH --gres=gpu:1\npython train.py\n",
           environment={}}
local parts = {}  -- part.NAME.FIELD: part_list (empty unless given)
for i = 2, #arg, 2 do
  local k, v = arg[i], tonumber(arg[i+1]) or arg[i+1]
  local pname, pfield = string.match(k, "^part%.([^.]+)%.(.+)$")
  if pname ~= nil then parts[pname] = parts[pname] or {}; parts[pname][pfield] = v
  elseif string.sub(k, 1, 4) == "env." then d.environment[string.sub(k, 5)] = v else d[k] = v end
end
local rc = slurm_job_submit(d, parts, 1000)
io.write(rc, "|", tostring(d.tres_per_node), "|", tostring(d.tres_per_job), "\n")
'''


def _lua_submit(tmp_path, **fields):
    if shutil.which("lua5.1") is None:
        pytest.skip("lua5.1 not installed (scripts/testcluster.sh install brings it)")
    stub = tmp_path / "stub.lua"
    stub.write_text(STUB)
    args = [str(x) for kv in fields.items() for x in kv]
    out = subprocess.run(["lua5.1", str(stub), LUA, *args], capture_output=True, text=True, check=True).stdout
    rc, tpn, tpj = out.strip().split("|")
    return int(rc), tpn, tpj


# 1. users' own shard requests are accepted: unvetted 1-shard jobs meet lucidd's vetted ones
@pytest.mark.parametrize("spec", ["gres:shard:1", "gres:shard:0"])
def test_lua_with_packing_on_does_not_let_users_ask_for_shards_themselves(tmp_path, spec):
    rc, tpn, _ = _lua_submit(tmp_path, tres_per_node=spec)
    # lucidd's guarantee "any two 1-shard jobs passed the same test" needs every 1-shard job to be
    # one lucidd lowered: a user's own shard:1 (say a Jumbo job) must be refused or made shard:2
    assert rc != 0 or tpn == "gres:shard:2", (rc, tpn)


# 2. --gpus=1 (one GPU for the whole job) becomes one GPU on *every* node of a multi-node job
def test_lua_does_not_turn_a_per_job_gpu_into_per_node_shards_when_the_job_may_span_nodes(tmp_path):
    rc, tpn, tpj = _lua_submit(tmp_path, tres_per_job="gres:gpu:1", num_tasks=64)  # -n64 --gpus=1, no -N
    assert rc == 0
    assert tpj == "gres:gpu:1" and tpn in ("nil", ""), (tpn, tpj)


# --gpu-bind, --gpu-freq and --ntasks-per-gpu name gpu: tried on the test cluster (28 November 2026),
# with shards the last two are refused at submission and --gpu-bind leaves srun steps of two tasks
# with no GPU (empty CUDA_VISIBLE_DEVICES); such a job keeps its GPU request
@pytest.mark.parametrize("fields", [{"tres_bind": "gpu:single:1"}, {"tres_bind": "gpu:closest"},
                                    {"tres_freq": "gpu:high"}, {"ntasks_per_tres": 2, "num_tasks": 2}])
def test_lua_leaves_a_job_with_gpu_only_options_on_its_gpu(tmp_path, fields):
    rc, tpn, _ = _lua_submit(tmp_path, tres_per_node="gres:gpu:1", **fields)
    assert rc == 0 and tpn == "gres:gpu:1", (rc, tpn)


def test_lua_converts_a_plain_one_gpu_job_with_the_unset_counts_slurm_gives_it(tmp_path):
    # what Slurm 22.05 hands the script for `sbatch --gres=gpu:1` (read off the test cluster)
    rc, tpn, _ = _lua_submit(tmp_path, tres_per_node="gres:gpu:1", ntasks_per_tres=65534, num_tasks=4294967294)
    assert rc == 0 and tpn == "gres:shard:2", (rc, tpn)


def _lowered_in_profiling(tmp_path, fail_move):
    """Job 5 profiled, requeued, lowered to 1 shard by _apply; its release (the move) fails."""
    cfg, clock, slurm, store, rec = _packing_cluster(tmp_path)
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    _profiled(slurm, store, clock, rec, 5)
    slurm.fail[("move", 5)] = fail_move  # the release after the requeue fails (or lucidd dies there)
    j = slurm.jobs[5]
    for _ in range(12):  # Tprof: requeued (pending in profiling, BeginTime), lowered, release fails
        _cycles(rec, clock, 10, check=False)
        if j.restart_count:
            j.reason = "BeginTime"
        if j.shards == 1:
            break
    assert (j.partition, j.pending, j.restart_count, j.shards) == ("profiling", True, 1, 1)
    return cfg, clock, slurm, store, rec


# 3. fail-open releases the requeued 1-shard job (starttime=now) before it raises its shards
def test_failopen_raises_a_requeued_jobs_shards_before_releasing_it(tmp_path):
    cfg, clock, slurm, store, rec = _lowered_in_profiling(tmp_path, ("slurmctld timed out", True, False))
    slurm.calls.clear()
    open_inbox(slurm, cfg, "lucidd is dead", clock=lambda: clock.t + 100)
    verbs = [c[0] for c in slurm.job_calls(5)]
    assert "shards" in verbs and verbs.index("shards") < verbs.index("move"), verbs


# 5. with [packing] off (turned off, or lucidd restarted without it) lowered jobs share for ever
def test_lucidd_with_packing_off_raises_jobs_it_lowered_earlier(tmp_path):
    cfg, clock, slurm, store, rec = _lowered_in_profiling(tmp_path, ("partition gone", False, False))
    slurm.jobs[5].partition = "main"  # released (say by the next cycle), waits in main with 1 shard
    del slurm.jobs[99]
    cfg2 = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                             "models": {"dir": str(tmp_path / "models")},
                             "profiler": {"tprof_s": 60, "skip_when_free": False, "lend_idle_gpus": False}})
    rec2 = Reconciler(cfg2, slurm, store, LucidDecider(cfg2), clock=clock, monotonic=clock)
    _cycles(rec2, clock, 60)
    assert slurm.jobs[5].pending and slurm.jobs[5].shards == 2


# 7. dry-run: the would-be shard change is recorded again every cycle (key has `now`, never applied)
def test_dry_run_records_a_shard_change_once_not_every_cycle(tmp_path):
    cfg, clock, slurm, store, rec = _packing_cluster(tmp_path, dry_run=True)
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    j = LiveJob(5, partition="main", gpus=1, shards=2, admin_comment=ORIG, submit_time=int(clock.t), reason="Priority")
    slurm.jobs[5] = j
    store.create_gpu_profiles()
    store.save_gpu_profiles([SimpleNamespace(job_id=5, partition="profiling", node="gpu1", first_t=clock.t,
                                             last_t=clock.t + 50, samples=10, util_samples=10, gpu_util=10.0,
                                             gmem_util=5.0, gmem_max_mib=3000.0, gpus={0})])
    _sampler_wrote(store, "gpu1", clock)
    _cycles(rec, clock, 600)
    rows = [a for a in store.actions_for(5) if a.kind == "shards"]
    assert 1 <= len(rows) <= 2, len(rows)


@pytest.mark.parametrize("fields,converted", [
    ({"tres_per_node": "gres:gpu:1"}, True),
    # kept on their GPU (an audit on the test cluster: each FAILED as shards, its srun steps refused)
    ({"tres_per_job": "gres:gpu:1"}, False),  # --gpus=1: sbatch exports SLURM_GPUS, srun reads it
    ({"tres_per_job": "gres:gpu:1", "num_tasks": 4, "max_nodes": 1}, False),
    ({"tres_per_node": "gres:gpu:1", "env.SLURM_GPUS_PER_NODE": "1"}, False),  # --gpus-per-node=1
    ({"tres_per_node": "gres:gpu:1", "script": ""}, False),  # srun/salloc: an interactive allocation
    ({"tres_per_node": "gres:gpu:1", "script": "#!/bin/bash\nsrun --gres=gpu:1 python train.py\n"}, False),
    ({"tres_per_node": "gres:gpu:1", "script": "#!/bin/sh\nsrun --gpus-per-task=1 -n1 ./a.out\n"}, False),
    ({"tres_per_node": "gres:gpu:1", "script": "#!/bin/sh\nsrun -G 1 ./a.out\n"}, False),
    ({"tres_per_node": "gres:gpu:1", "script": "#!/bin/sh\nsrun --cpus-per-gpu=4 ./a.out\n"}, False),
    ({"tres_per_node": "gres:gpu:1", "script": "#!/bin/sh\n#SBATCH --gres=gpu:1\nsrun ./a.out\n"}, True),
    ({"tres_per_node": "gres:gpu:1", "comment": "lucid:noprofile"}, False),  # never profiled, never lowered
    ({"tres_per_node": "gres:gpu:2"}, False),
    ({"tres_per_node": "gres:gpu:1", "min_nodes": 2, "max_nodes": 2}, False),
    ({"tres_per_node": "gres:gpu:1", "mem_per_tres": "gres:gpu:1024"}, False),
    # whole nodes: Slurm 22.05 never starts a job of shards there, not even on an idle node (it
    # pended with Resources for ever on the test cluster: a review, 3 December 2026)
    ({"tres_per_node": "gres:gpu:1", "shared": 0}, False),  # --exclusive
    ({"tres_per_node": "gres:gpu:1", "shared": 2}, True),  # --exclusive=user starts as shards
    ({"tres_per_node": "gres:gpu:1", "shared": 65534}, True),  # unset (NO_VAL16)
    ({"tres_per_node": "gres:gpu:1", "partition": "research", "part.research.max_share": 0}, False),
    ({"tres_per_node": "gres:gpu:1", "partition": "main,research", "part.main.max_share": 1,
      "part.research.max_share": 0}, False),  # a list: it may start in the exclusive one
    ({"tres_per_node": "gres:gpu:1", "part.main.max_share": 0}, False),  # no -p: the default one
    ({"tres_per_node": "gres:gpu:1", "partition": "research", "part.research.max_share": 1}, True),
])
def test_lua_converts_only_a_plain_one_gpu_request_on_one_node(tmp_path, fields, converted):
    rc, tpn, tpj = _lua_submit(tmp_path, **fields)
    assert rc == 0
    assert (tpn == "gres:shard:2" and tpj in ("", "nil")) == converted, (tpn, tpj)


def test_a_job_lowered_raised_and_wanted_again_is_lowered_again_at_once(packing_cluster):
    cfg, clock, slurm, store, rec = packing_cluster
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    _profiled(slurm, store, clock, rec, 5)
    _cycles(rec, clock, 80)
    slurm.jobs[5].reason = "BeginTime"
    _cycles(rec, clock, 20)
    j5 = slurm.jobs[5]
    assert j5.shards == 1
    slurm.jobs[99].reason = "Dependency"  # nobody waits for GPUs any more
    j5.reason = "None"
    _cycles(rec, clock, 90)
    assert j5.shards == 2
    slurm.jobs[99].reason = "Resources"  # someone does again, minutes later
    _cycles(rec, clock, 10)
    assert j5.shards == 1


def test_a_shard_change_slurm_did_not_answer_is_asked_again_at_the_next_cycle(packing_cluster):
    cfg, clock, slurm, store, rec = packing_cluster
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    slurm.jobs[5] = LiveJob(5, partition="main", gpus=1, shards=2, admin_comment=ORIG, submit_time=int(clock.t),
                            reason="Priority")
    store.create_gpu_profiles()
    store.save_gpu_profiles([SimpleNamespace(job_id=5, partition="profiling", node="gpu1", first_t=clock.t,
                                             last_t=clock.t + 50, samples=10, util_samples=10, gpu_util=10.0,
                                             gmem_util=5.0, gmem_max_mib=3000.0, gpus={0})])
    _sampler_wrote(store, "gpu1", clock)
    slurm.fail[("shards", 5)] = ("Socket timed out on send/recv operation", True, False)
    _cycles(rec, clock, 10, check=False)
    assert slurm.jobs[5].shards == 2
    _cycles(rec, clock, 10)
    assert slurm.jobs[5].shards == 1  # not held back 10 minutes as a refusal would be


def test_explain_gives_each_jobs_packing_test(packing_cluster, tmp_path):
    from lucidd.admin_cli import explain_data

    cfg, clock, slurm, store, rec = packing_cluster
    _profiled(slurm, store, clock, rec, 5, util=10.0)
    _profiled(slurm, store, clock, rec, 6, util=90.0)
    k5, k6 = explain_data(cfg, store, 5)["packing"], explain_data(cfg, store, 6)["packing"]
    assert k5["enabled"] and k5["may_share"] and k5["class"] == "Tiny" and k5["blocker"] == ""
    assert "SM utilisation 10 %" in k5["how"]
    assert not k6["may_share"] and k6["class"] == "Jumbo" and "GSS 1" in k6["blocker"]
    off = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"dir": str(tmp_path / "models")}})
    k = explain_data(off, store, 5)["packing"]
    assert not k["enabled"] and "off" in k["blocker"]


def test_explain_gives_the_time_limit_rule_from_the_limit_slurm_showed(packing_cluster):
    from lucidd.admin_cli import explain_data

    cfg, clock, slurm, store, rec = packing_cluster
    _profiled(slurm, store, clock, rec, 5, util=10.0)
    _cycles(rec, clock, 80)  # Tprof: requeued, pending again (BeginTime), then released
    slurm.jobs[5].reason = "BeginTime"
    _cycles(rec, clock, 20)
    assert slurm.jobs[5].partition == "main" and slurm.jobs[5].pending  # waiting there: it has an estimate
    assert explain_data(cfg, store, 5)["packing"]["may_share"]
    slurm.jobs[5].time_limit_s = 60  # (scontrol update timelimit=1) any estimate, slowed by sharing, passes it
    _cycles(rec, clock, 10)
    assert store.job(5).time_limit_s == 60 and store.job(5).estimate_s
    k = explain_data(cfg, store, 5)["packing"]
    # (no history here: its estimate is the constant default, so the limit alone keeps its GPU)
    assert store.job(5).estimate_source == "default"
    assert not k["may_share"] and k["class"] == "Tiny" and "it has a time limit (60 s)" in k["blocker"]
    slurm.jobs[5].time_limit_s = None  # the limit taken away (scontrol update timelimit=UNLIMITED)
    _cycles(rec, clock, 10)
    assert store.job(5).time_limit_s is None and explain_data(cfg, store, 5)["packing"]["may_share"]


def test_a_job_whose_limit_leaves_no_room_for_sharing_keeps_its_gpu():
    """Sharing slows a job; one whose estimate, at the slowest speed a partner allowed by GSS leaves it
    (0.85 with Tiny partners only), would pass its time limit would be ended by Slurm there (TIMEOUT):
    it keeps a GPU of its own. Found by replaying packing on Venus."""
    from binder.live import limit_blocker

    # the default rule: Tiny below 15 %, GSS 1: a partner leaves a job 1 / 1.15 = 0.87 of its speed
    assert limit_blocker(3000, 3600, CFG) is None and limit_blocker(3000, None, CFG) is None
    # an estimate that is a constant (the default before any history, or the fallback's constant
    # after it): a job with a limit keeps its GPU; no estimate at all ([ordering] off) holds nothing
    assert limit_blocker(None, 60, CFG) is None
    assert "no estimate of its own" in limit_blocker(3000, 4800, CFG, "default")
    assert "no estimate of its own" in limit_blocker(3600, 5400, CFG, "fallback:constant")
    assert limit_blocker(3000, 4800, CFG, "ebm:v1") is None and limit_blocker(3000, None, CFG, "default") is None
    assert "too close" in limit_blocker(3200, 3600, CFG) and "0.87 of its speed" in limit_blocker(3200, 3600, CFG)
    # Medium partners (GSS 2, 3): up to 60 %, 1 / 1.6 = 0.625 (two ResNet-18s at 53 % kept 0.65 on an H200)
    medium = LivePackingConfig(gss=3, gpu_memory_mib=24576)
    assert limit_blocker(2200, 3600, medium) is None and "0.62 of its speed" in limit_blocker(2300, 3600, medium)
    assert "0.45 of its speed" in limit_blocker(1700, 3600, LivePackingConfig(gss=4, gpu_memory_mib=24576))
    job = SimpleNamespace(job_id=5, partition="main", time_limit_s=3600)
    count, why = shard_decision(job, "main", prof(), {"main": 9}, CFG, estimate_s=3200)
    assert count == OWN and "time limit" in why
    assert shard_decision(job, "main", prof(), {"main": 9}, CFG, estimate_s=1000)[0] == SHARED


def test_status_says_the_packing_rule_it_applies(tmp_path, capsys):
    from lucidd.admin_cli import cmd_live

    cfg, clock, slurm, store, rec = _packing_cluster(tmp_path)
    _cycles(rec, clock, 10)
    path = tmp_path / "lucidd.toml"
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n[packing]\nenabled = true\ngpu_memory_mib = 24576\n')
    assert cmd_live(SimpleNamespace(config=str(path), json=False, command="status")) == 0
    out = capsys.readouterr().out
    assert "GPU packing: on (GSS 1, GPUs of 24,576 MiB, the rule on SM utilisation: Tiny below 15 %, Jumbo from 60 %" \
        in out, out


# ----- [packing] gpu_memory_mib = 0: each partition's smallest GPU, as the samplers report it -------

def test_the_memory_rule_takes_the_smallest_gpu_of_the_jobs_partitions():
    from binder.live import with_gpu_memory

    auto = LivePackingConfig()
    mem = {"main": {"a1": 81559.0, "a2": 40960.0}, "big": {"a1": 81559.0}, "new": {"a1": 81559.0, "b1": None}}
    assert with_gpu_memory(auto, "main", mem).gpu_memory_mib == 40960.0
    assert with_gpu_memory(auto, "big", mem).gpu_memory_mib == 81559.0
    assert with_gpu_memory(auto, "big,main", mem).gpu_memory_mib == 40960.0  # Slurm may pick either
    unknown = with_gpu_memory(auto, "new", mem)
    assert unknown.gpu_memory_mib == 0 and "no NVML sampler has reported the GPUs of b1 (1 of 2" in unknown.memory_unknown
    assert "no GPU node of gone is known" in with_gpu_memory(auto, "gone", mem).memory_unknown
    assert with_gpu_memory(CFG, "new", mem) is CFG  # a configured size is taken as it is
    count, why = shard_decision(SimpleNamespace(job_id=5, partition="new"), "new", prof(), {"new": 9}, unknown)
    assert count == OWN and "no NVML sampler has reported the GPUs of b1" in why
    # 3,000 MiB fits half of an 8 GiB GPU less the headroom, not half of a 6 GiB one
    small = {"main": {"a1": 8192.0, "a2": 6144.0}}
    count, why = shard_decision(SimpleNamespace(job_id=5, partition="main"), "main", prof(mem=3000), {"main": 9},
                                with_gpu_memory(auto, "main", small))
    assert count == OWN and "more than half of a GPU's 6144 MiB" in why


def test_with_gpu_memory_0_lucidd_packs_once_every_node_of_the_partition_has_said(tmp_path):
    from lucidd.admin_cli import explain_data

    cfg, clock, slurm, store, rec = _packing_cluster(tmp_path, gpu_memory_mib=0)
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    _profiled(slurm, store, clock, rec, 5)
    _sampler_wrote(store, "gpu1", clock)  # gpu2's sampler has not said
    _cycles(rec, clock, 80)
    slurm.jobs[5].reason = "BeginTime"
    _cycles(rec, clock, 20)
    assert (slurm.jobs[5].partition, slurm.jobs[5].shards) == ("main", 2)
    k = explain_data(cfg, store, 5)["packing"]
    assert not k["may_share"] and "no NVML sampler has reported the GPUs of gpu2 (1 of 2" in k["blocker"]
    assert k["gpu_memory_mib"] is None
    _sampler_wrote(store, "gpu2", clock)
    _cycles(rec, clock, 10)
    assert slurm.jobs[5].shards == 1
    (act,) = [a for a in store.actions_for(5) if a.kind == "shards"]
    assert "may share a GPU" in act.reason
    k = explain_data(cfg, store, 5)["packing"]
    assert k["may_share"] and k["gpu_memory_mib"] == 24576.0
    # a node with small GPUs joins the partition: its 4 GiB GPUs cannot hold two 3,000 MiB jobs
    slurm.nodes["gpu3"] = NodeGPUs("gpu3", 8, 0, "IDLE", ("inbox", "profiling", "main"))
    _sampler_wrote(store, "gpu3", clock, 4096.0, "SmallGPU")
    _cycles(rec, clock, 10)
    assert slurm.jobs[5].shards == 2
    assert "more than half of a GPU's 4096 MiB" in explain_data(cfg, store, 5)["packing"]["blocker"]


def test_a_replay_with_packing_needs_the_gpu_memory_set():
    from lucidd.cluster import ClusterSpec, VCSpec
    from orchestrator.slurm_mode import LucidOnSlurm, live_config

    spec = ClusterSpec({"a": VCSpec("a", 1, 8)})
    with pytest.raises(ConfigError, match="a replay needs it set"):
        LucidOnSlurm([], spec, live_config({"packing": {"enabled": True}}))
    assert LucidOnSlurm([], spec, live_config({"packing": {"enabled": True, "gpu_memory_mib": 24576}})).pack


MODIFY_STUB = r"""
slurm = {SUCCESS=0, ERROR=-1, NO_VAL=4294967294, ESLURM_ACCESS_DENIED=2002,
  log_user=function(...) end, log_info=function(...) end}
local src = io.open(arg[1]):read("*a")
if arg[2] == "on" then src = src:gsub("local LUCIDD_PACKING = false", "local LUCIDD_PACKING = true") end
assert(loadstring(src))()
local rec, d = {partition="main"}, {min_nodes=4294967294, max_nodes=4294967294}
for i = 4, #arg, 2 do
  local k, v = arg[i], tonumber(arg[i+1]) or arg[i+1]
  if string.sub(k, 1, 4) == "rec." then rec[string.sub(k, 5)] = v else d[k] = v end
end
io.write(slurm_job_modify(d, rec, {}, tonumber(arg[3])), "\n")
"""
SHARD_JOB = {"rec.tres_per_node": "gres:shard:2", "rec.admin_comment": "lucid:orig=tres_per_node=gres:gpu:1"}


@pytest.mark.parametrize("packing,fields,allowed", [
    # packing turned off with converted jobs left (docs/deploy.md, "Turning it off"): the guard holds
    ("off", {**SHARD_JOB, "tres_per_node": ""}, False),  # `scontrol update trespernode=`: notes G.3.3
    ("off", {**SHARD_JOB, "tres_per_node": "gres:shard:1"}, False),
    ("on", {**SHARD_JOB, "tres_per_node": ""}, False),
    ("off", {"rec.tres_per_node": "gres:gpu:1", "tres_per_node": "gres:gpu:2"}, True),  # no shards: the user's
    # more nodes would give a 1-shard job a shared GPU on each, unjudged (an audit)
    ("off", {**SHARD_JOB, "min_nodes": 2, "max_nodes": 2}, False),
    ("on", {**SHARD_JOB, "min_nodes": 1, "max_nodes": 1}, True),
    ("off", {**SHARD_JOB, "time_limit": 5}, True),  # anything else is the user's
])
def test_lua_guards_a_job_of_shards_whatever_lucidd_packing_says(tmp_path, packing, fields, allowed):
    if shutil.which("lua5.1") is None:
        pytest.skip("lua5.1 not installed (scripts/testcluster.sh install brings it)")
    stub = tmp_path / "modify.lua"
    stub.write_text(MODIFY_STUB)
    args = [str(x) for kv in fields.items() for x in kv]
    out = subprocess.run(["lua5.1", str(stub), LUA, packing, "1000", *args], capture_output=True, text=True,
                         check=True).stdout
    assert (int(out) == 0) == allowed, (packing, fields, out)
    root = subprocess.run(["lua5.1", str(stub), LUA, packing, "0", *args], capture_output=True, text=True,
                          check=True).stdout
    assert int(root) == 0  # root (and lucidd) may
