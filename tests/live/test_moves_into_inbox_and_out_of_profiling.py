"""Jobs an admin (or, where job_submit.lua allows it, their owner) moves where lucidd did not send
them: back into the inbox, or out of profiling before their run there started. Each is found at the
next cycle and sent on; none waits in the DOWN inbox, or behind an ExcNodeList lucidd set, for ever.
Found by an audit (28 November 2026) on the real test cluster as well: the job sat in the inbox
(PartitionDown), or in its partition (BadConstraints) with its nodes idle, while lucidd ran."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lucidd.backends.base import LiveJob, NodeGPUs
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler, open_inbox
from lucidd.live.store import Store
from orchestrator.live import LucidDecider
from tests.live.memslurm import Clock, MemSlurm
from tests.live.test_reconcile_recovery import cluster, run_cycles  # noqa: F401 - the same in-memory cluster


def test_released_job_moved_back_into_inbox_is_released_again(cluster):
    """A job lucidd released straight to its partition (here: a CPU job; any skip reason does) is
    moved back into the inbox (`scontrol update jobid=N partition=inbox`: job_submit.lua refuses it to
    users now, not to admins). Its release was keyed by restart count alone, so the second one was
    taken as already made and never sent: the job waited in the DOWN inbox for ever."""
    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(20, partition="main", gpus=0)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[20].partition == "main" and store.job(20).phase == "released"
    slurm.jobs[20].partition = "inbox"  # the owner's scontrol update jobid=20 partition=inbox
    run_cycles(rec, clock, 600)
    assert slurm.jobs[20].partition == "main", (
        f"job 20 still in {slurm.jobs[20].partition} after 10 min; record phase={store.job(20).phase!r}, "
        f"reason={store.job(20).profile_reason!r}; moves sent: {slurm.job_calls(20)}")
    r = store.job(20)
    assert r.phase == "released" and r.profile == "skipped", (r.phase, r.profile)
    assert "back in inbox, to main again" in r.profile_reason and "after a requeue" not in r.profile_reason, \
        r.profile_reason
    # and a third time: each return is a new release
    slurm.jobs[20].partition = "inbox"
    run_cycles(rec, clock, 20)
    assert slurm.jobs[20].partition == "main"


def test_released_job_moved_back_into_inbox_is_released_after_a_restart_too(cluster):
    """Same, across a lucidd restart (the keys are in the database)."""
    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(21, partition="main", gpus=1, comment="lucid:noprofile")
    run_cycles(rec, clock, 10)
    assert slurm.jobs[21].partition == "main"
    slurm.jobs[21].partition = "inbox"
    rec = lucidd()
    run_cycles(rec, clock, 600)
    assert slurm.jobs[21].partition == "main", (slurm.jobs[21].partition, store.job(21).phase,
                                                store.job(21).profile_reason)


def test_admitted_job_moved_from_profiling_into_inbox_is_not_left_there(cluster):
    """A job admitted to profiling and not yet started there is moved into the inbox. Its record
    said phase profiling, and nothing picked it up again (the inbox's jobs are phase-inbox records,
    the 2 x Tprof withdrawal looks in profiling only): it goes to its partition, unprofiled."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False)
    rec = lucidd()
    slurm.submit(30, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[30].partition == "profiling" and store.job(30).phase == "profiling"
    slurm.jobs[30].partition = "inbox"  # the owner's scontrol update jobid=30 partition=inbox
    run_cycles(rec, clock, 3 * 3600)  # well past room_wait (2 x Tprof)
    assert slurm.jobs[30].partition == "main", (
        f"job 30 still in {slurm.jobs[30].partition} after 3 h; record phase={store.job(30).phase!r}, "
        f"reason={store.job(30).profile_reason!r}")
    r = store.job(30)
    assert (r.phase, r.profile) == ("released", "skipped") and "(not profiled)" in r.profile_reason, r


def test_a_requeued_profiling_run_moved_into_the_inbox_goes_to_its_partition_as_profiled(cluster):
    """The same move of a job whose profiling run lucidd requeued (it waits in profiling for its
    restart): it goes to its partition, and stays counted as profiled (its figures were taken)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    slurm.submit(31, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[31].partition == "profiling"
    slurm.start(31)
    for _ in range(70):  # to Tprof, one cycle at a time: lucidd requeues the run
        run_cycles(rec, clock, 10)
        if store.job(31).profile == "requeued":
            break
    assert store.job(31).profile == "requeued" and slurm.jobs[31].partition == "profiling", store.job(31)
    slurm.jobs[31].partition = "inbox"  # moved before lucidd sends it on
    run_cycles(rec, clock, 20)
    assert slurm.jobs[31].partition == "main"
    r = store.job(31)
    assert r.profile == "released" and r.profile_reason == "back in inbox, to main again", r.profile_reason


def test_a_requeued_run_found_in_profiling_without_a_record_is_released_not_profiled_again(cluster):
    """lucidd's database lost (or replaced) while a requeued profiling run waits in profiling for its
    restart: found there with no record, it was taken as admitted: on the test cluster it ran a
    second profiling run once its BeginTime passed (the audit); here it was withdrawn as a job its
    owner had delayed. It is a requeued run, released as one."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    slurm.jobs[50] = LiveJob(50, partition="profiling", gpus=1, submit_time=int(clock()), state="PENDING",
                             reason="BeginTime", restart_count=1, admin_comment="lucid:partition=main")
    rec = lucidd()
    run_cycles(rec, clock, 20)
    assert slurm.jobs[50].partition == "main", slurm.job_calls(50)
    r = store.job(50)
    assert (r.phase, r.profile) == ("released", "released"), (r.phase, r.profile, r.profile_reason)
    assert not any(c[0] == "requeue" for c in slurm.job_calls(50))


def _research_job_after_a_cycle(tmp_path, main_node: NodeGPUs, **profiler):
    """Job 40 of research after one cycle: research (gpu2) is full with a job waiting there, main's
    node is `main_node` and nobody waits in main."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "lend_idle_gpus": True, "skip_when_free": False,
                                         **profiler}})
    clock = Clock()
    slurm = MemSlurm(clock, partitions=("inbox", "profiling", "main", "research"))
    slurm.nodes = {"gpu1": main_node, "gpu2": NodeGPUs("gpu2", 8, 8, "ALLOCATED", ("inbox", "profiling", "research"))}
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    # a job already waiting in research (seen there: lucidd records it as released)
    slurm.jobs[1] = LiveJob(1, partition="research", gpus=8, submit_time=int(clock()), reason="Resources",
                            comment="lucid:noprofile")
    slurm.submit(40, partition="research", gpus=1)
    run_cycles(rec, clock, 10)
    return cfg, clock, slurm, store, rec


def _lent_run(tmp_path, **profiler):
    """Job 40 of research admitted to profiling on lent GPUs (ExcNodeList gpu2, research's node):
    gpu1, main's node, is idle."""
    cfg, clock, slurm, store, rec = _research_job_after_a_cycle(
        tmp_path, NodeGPUs("gpu1", 8, 0, "IDLE", ("inbox", "profiling", "main")), **profiler)
    j = slurm.jobs[40]
    assert j.partition == "profiling" and j.excluded_nodes == "gpu2", (j.partition, j.excluded_nodes)
    assert store.job(40).lent
    return cfg, clock, slurm, store, rec


def test_gpus_on_a_node_whose_cpus_are_all_taken_are_not_lent(tmp_path):
    """As `_lent_run`, but main's idle GPUs sit on a node a CPU-only job has filled (idle_cpus 0):
    nothing is lent there (a run steered onto it could not start, and waited admitted for hours)."""
    _, _, slurm, store, _ = _research_job_after_a_cycle(
        tmp_path, NodeGPUs("gpu1", 8, 0, "ALLOCATED", ("inbox", "profiling", "main"), idle_cpus=0), capacity_gpus=1)
    assert not store.job(40).lent and not slurm.jobs[40].excluded_nodes, (store.job(40).profile_reason,)


@pytest.fixture
def lent_then_moved(tmp_path):
    cfg, clock, slurm, store, rec = _lent_run(tmp_path)
    j = slurm.jobs[40]
    # Slurm has not started it yet (no CPUs free on gpu1, say); its owner moves it to research:
    # `scontrol update jobid=40 partition=research` (an admin's; job_submit.lua refuses it to users since v5)
    j.partition, j.reason = "research", "BadConstraints"
    return cfg, clock, slurm, store, rec


def test_a_lent_job_moved_out_of_profiling_gets_its_excnodelist_cleared(lent_then_moved):
    cfg, clock, slurm, store, rec = lent_then_moved
    run_cycles(rec, clock, 600)
    j = slurm.jobs[40]
    assert "gpu2" not in j.excluded_nodes, (
        f"job 40 pends in {j.partition} with ExcNodeList={j.excluded_nodes!r} (all of research's nodes) "
        f"for good; lucidd's record: {store.job(40).profile_reason!r}")


def test_a_refused_clearing_is_not_retried_and_the_job_is_flagged(lent_then_moved):
    """Slurm refuses the clearing for good: lucidd does not ask again every cycle, and the job is
    flagged as one Slurm may never start there, with what an admin can do."""
    cfg, clock, slurm, store, rec = lent_then_moved
    # (message, transient, applied): a permanent refusal that changed nothing
    slurm.fail[("move", 40)] = ("Requested partition configuration not available now", False, False)
    run_cycles(rec, clock, 60)
    moves = [c for c in slurm.job_calls(40) if c[0] == "move"]
    assert len(moves) == 2, moves  # lucidd's admission, and one try at clearing
    r = store.job(40)
    assert not r.lent and "may never start" in r.profile_reason, r.profile_reason


def test_the_cleared_excnodelist_is_recorded_and_cleared_once(lent_then_moved):
    """The clearing is an action of its own (lucidctl explain shows it), made once: a list the job's
    owner sets afterwards is theirs, and the fail-open leaves the job where it is."""
    cfg, clock, slurm, store, rec = lent_then_moved
    run_cycles(rec, clock, 10)
    r = store.job(40)
    assert not r.lent and "ExcNodeList lucidd had set for lent GPUs cleared" in r.profile_reason, r
    assert "may never start" not in r.profile_reason, r.profile_reason
    acts = [a for a in store.actions_for(40) if a.key.startswith("unexclude:")]
    assert [(a.kind, a.status, json.loads(a.args)) for a in acts] == [("release", "applied",
                                                           {"partition": "research", "excnodelist": ""})], acts
    slurm.jobs[40].excluded_nodes = "gpu9"  # its owner's own, later
    run_cycles(rec, clock, 60)
    assert slurm.jobs[40].excluded_nodes == "gpu9"
    open_inbox(slurm, cfg, "lucidd-failopen --force")
    assert slurm.jobs[40].partition == "research" and slurm.jobs[40].excluded_nodes == "gpu9"


# ----- job_submit.lua's guard on partition changes (lua5.1, as slurmctld runs the script) ---------

LUA = str(Path(__file__).resolve().parents[2] / "lucidd" / "data" / "slurm" / "job_submit.lua")
MODIFY_STUB = r'''
slurm = {SUCCESS=0, ERROR=-1, NO_VAL=4294967294, ESLURM_ACCESS_DENIED=2002,
  log_user=function(...) end, log_info=function(...) end}
assert(loadstring(io.open(arg[1]):read("*a")))()
-- arg[5]: a requeue= change ("" none)
local desc = {partition=arg[3], requeue=(arg[5] ~= nil and arg[5] ~= "" and tonumber(arg[5]) or 65534)}
io.write(slurm_job_modify(desc, {partition=arg[2]}, {}, tonumber(arg[4])), "\n")
'''


@pytest.mark.parametrize("now_in,to,uid,allowed", [
    ("research", "inbox", 1000, False),  # back into the (default, DOWN) inbox
    ("main", "inbox,main", 1000, False),
    ("profiling", "research", 1000, False),  # out of profiling while it waits there
    ("inbox", "main", 1000, False),  # out of the inbox (version 1)
    ("main", "profiling", 1000, False),  # into profiling (version 2)
    ("main", "research", 1000, True),  # between the site's own partitions: the user's
    ("research", "inbox", 0, True),  # root (an admin; lucidd sends such a job on)
    ("profiling", "main", 0, True),  # lucidd's own release
    # requeue=0 (version 8): refused to a user while the job is lucidd's to requeue (its run stayed
    # in profiling, ahead of every queue: a review); elsewhere, and to an admin, allowed
    ("profiling", "=0", 1000, False),
    ("inbox", "=0", 1000, False),
    ("main", "=0", 1000, True),
    ("profiling", "=1", 1000, True),
    ("profiling", "=0", 0, True),
])
def test_lua_refuses_users_moves_into_the_inbox_and_out_of_profiling(tmp_path, now_in, to, uid, allowed):
    if shutil.which("lua5.1") is None:
        pytest.skip("lua5.1 not installed (scripts/testcluster.sh install brings it)")
    stub = tmp_path / "modify.lua"
    stub.write_text(MODIFY_STUB)
    to, requeue = ("", to[1:]) if to.startswith("=") else (to, "")  # "=0": scontrol update requeue=0
    out = subprocess.run(["lua5.1", str(stub), LUA, now_in, to, str(uid), requeue], capture_output=True, text=True,
                         check=True).stdout
    assert (int(out) == 0) == allowed, (now_in, to, uid, out)


SUBMIT_STUB = r'''
-- log_user formats its arguments as Slurm's does (user_msg(string.format(unpack({...}))))
slurm = {SUCCESS=0, ERROR=-1, NO_VAL=4294967294, ESLURM_ACCESS_DENIED=2002,
  log_user=function(...) io.stderr:write(string.format(unpack({...}))) end, log_info=function(...) end}
assert(loadstring(io.open(arg[1]):read("*a")))()
-- arg[2]: the partitions the user may use, "name=state_up,...", arg[3]: -p ("" none), arg[4]: --immediate
local parts = {}
-- ("name=state_up" or "name=state_up:default_time"), arg[5]: --time in minutes ("" none)
for name, state, dt in string.gmatch(arg[2], "([^,=]+)=(%d+):?(%d*)") do
  parts[name] = {state_up=tonumber(state), default_time=(dt ~= "" and tonumber(dt) or slurm.NO_VAL)}
end
-- arg[6]: "batch" (sbatch: a script), "interactive" (salloc, srun: none), "het1" (a het job's
-- second component: no script, het_job_offset 1, as seen on 22.05); "nodelist", "exclude",
-- "norequeue": a batch job with -w gpu1, --exclude gpu3, --no-requeue
local job = {partition=(arg[3] ~= "" and arg[3] or nil), immediate=tonumber(arg[4]),
             time_limit=(arg[5] ~= "" and tonumber(arg[5]) or slurm.NO_VAL),
             script=((arg[6] ~= "interactive" and arg[6] ~= "het1") and "#!/bin/bash\nsleep 1\n" or nil),
             het_job_offset=(arg[6] == "het1" and 1 or slurm.NO_VAL),
             req_nodes=(arg[6] == "nodelist" and "gpu1" or nil), exc_nodes=(arg[6] == "exclude" and "gpu3" or nil),
             requeue=(arg[6] == "norequeue" and 0 or 65534)}
local rc = slurm_job_submit(job, parts, 1000)
io.write(rc, " ", job.partition or "-", " ", job.admin_comment or "-",
         job.time_limit ~= slurm.NO_VAL and (" t=" .. job.time_limit) or "", "\n")
'''
DOWN = "inbox=1,profiling=3,main=3,research=3"  # PARTITION_SUBMIT alone: the inbox as lucidd keeps it
UP = "inbox=3,profiling=3,main=3,research=3"


@pytest.mark.parametrize("parts,asked,immediate,want", [
    (DOWN, "main", 0, "0 inbox lucid:partition=main"),
    (DOWN, "main,research", 0, "0 inbox lucid:partition=main,research"),
    (DOWN, "", 0, "0 - -"),  # the default partition, the inbox; lucidd sends it to [slurm] default_partition
    # refused as plain Slurm refuses it; accepted, it waited in the DOWN inbox for ever (a review)
    (DOWN, "nosuch", 0, "-1 nosuch -"),
    (DOWN, "main,nosuch", 0, "-1 main,nosuch -"),
    (DOWN, "MAIN", 0, "-1 MAIN -"),  # Slurm's names are case-sensitive (22.05: "Invalid partition name")
    (DOWN, "main, research", 0, "-1 main, research -"),  # Slurm refuses the space, lucidd read "main"
    ("inbox=1,main=3", "research", 0, "-1 research -"),  # AllowGroups keeps it from the user
    # lucidd away (the inbox opened by lucidd-failopen or its stop): left where plain Slurm puts it,
    # not run in the inbox on nodes outside its partition (a review)
    (UP, "research", 0, "0 research -"),
    (UP, "", 0, "0 main -"),
    (UP, "nosuch", 0, "0 nosuch -"),  # Slurm refuses it itself
    ("inbox=0,main=3", "research", 0, "0 research -"),  # INACTIVE: takes no job
    # srun -I / salloc -I: must start at once, and lucidd would release it only at its next cycle
    (DOWN, "main", 5, "0 main -"),
    (DOWN, "", 1, "0 main -"),
    ("main=3,research=3", "main", 0, "0 inbox lucid:partition=main"),  # an inbox the user cannot see: as before
    # no --time: the DefaultTime of the partition it asked for (the first of a list), not the inbox's
    ("inbox=1,main=3,research=3:30", "research,main", 0, "0 inbox lucid:partition=research,main t=30"),
    ("inbox=1,main=3,research=3:30", "main", 0, "0 inbox lucid:partition=main"),
    ("inbox=1,main=3,research=3:30", "research/5", 0, "0 inbox lucid:partition=research t=5"),  # its own
    ("inbox=1,main=3:30,research=3", "", 0, "0 - - t=30"),  # no -p: DEFAULT's, where lucidd releases it
    ("inbox=1,profiling=3,main=3:30", "profiling", 0, "0 inbox lucid:partition=profiling t=30"),
    # left to Slurm, a job never goes into profiling (ahead of every queue) nor runs in the inbox
    (UP, "profiling", 0, "0 main -"),
    (UP, "inbox", 0, "0 main -"),
    (UP, "profiling,research", 0, "0 research -"),
    (DOWN, "profiling", 5, "0 main -"),
    (DOWN, "gpu%d", 0, "-1 gpu%d -"),  # a name with a format directive: refused with its message
    # salloc, srun (no script: version 7): left to Slurm, in its partition; never profiled, and in the
    # DOWN inbox it waited for lucidd's next cycle under "Partition in DOWN state" (a review)
    (DOWN, "main#interactive", 0, "0 main -"),
    (DOWN, "#interactive", 0, "0 main -"),
    (DOWN, "profiling,research#interactive", 0, "0 research -"),
    # a het job's later component has no script either: routed, as its leader is
    (DOWN, "research#het1", 0, "0 inbox lucid:partition=research"),
    # --nodelist, --exclude, --no-requeue (version 8): never profiled, and checked by Slurm against
    # the partition asked for only if submitted there (through the inbox, a node outside it passed)
    (DOWN, "research#nodelist", 0, "0 research -"),
    (DOWN, "research#exclude", 0, "0 research -"),
    (DOWN, "main#norequeue", 0, "0 main -"),
    (DOWN, "#nodelist", 0, "0 main -"),
])
def test_lua_routes_new_jobs_through_the_inbox_only_while_it_is_down(tmp_path, parts, asked, immediate, want):
    if shutil.which("lua5.1") is None:
        pytest.skip("lua5.1 not installed (scripts/testcluster.sh install brings it)")
    stub = tmp_path / "submit.lua"
    stub.write_text(SUBMIT_STUB)
    asked, _, kind = asked.partition("#")  # "main#interactive": salloc -p main
    asked, _, minutes = asked.partition("/")  # "research/5": -p research --time=5
    out = subprocess.run(["lua5.1", str(stub), LUA, parts, asked, str(immediate), minutes, kind or "batch"],
                         capture_output=True, text=True, check=True)
    names = {p.split("=")[0] for p in parts.split(",")}
    refused = next((p for p in asked.split(",") if p not in names), None)
    assert out.stdout.strip() == want, (parts, asked, immediate, out.stderr)
    if want.startswith("-1"):
        assert out.stderr == f"invalid partition specified: '{refused}' (no such partition, or not one you may use)"


def test_an_owners_list_set_after_a_lent_runs_release_is_left_alone(tmp_path):
    """A review of the change: lucidd's release after a lent run cleared its list but kept the job
    marked lent, so a list its owner set later was taken for lucidd's and cleared."""
    cfg, clock, slurm, store, rec = _lent_run(tmp_path, long_tprof_s=600)
    slurm.start(40)
    for _ in range(200):  # Tprof: requeued, released to research with its list cleared
        run_cycles(rec, clock, 10)
        if slurm.jobs[40].partition == "research":
            break
    j = slurm.jobs[40]
    assert j.partition == "research" and j.excluded_nodes == "" and not store.job(40).lent
    j.reason, j.excluded_nodes = "Resources", "gpu7"  # its owner's: scontrol update jobid=40 excnodelist=gpu7
    run_cycles(rec, clock, 60)
    assert slurm.jobs[40].excluded_nodes == "gpu7"
    assert not any(a.key.startswith("unexclude:") for a in store.actions_for(40))


@pytest.mark.parametrize("asked", ["main", "main,research"])
def test_a_lent_run_kept_past_its_tprof_is_reclaimed_once_a_job_has_waited_long_tprof_s(tmp_path, asked):
    """[profiler] keep_lent_while_idle: the daemon gives the decider each busy node's longest wait
    since submission (DecisionInput.node_wait_s); a lent run past its Tprof stays while nobody has
    waited long_tprof_s for its node, and is requeued at the cycle after someone has. A job asking
    for `-p main,research` waits in main too (a review found it keyed by the whole list, so that no
    node's partition matched it and the run was never reclaimed)."""
    cfg, clock, slurm, store, rec = _lent_run(tmp_path, long_tprof_s=600, keep_lent_while_idle=True)
    slurm.start(40)
    slurm.jobs[40].node_names = ("gpu1",)  # where Slurm started it: the only node its list leaves
    slurm.nodes["gpu1"] = NodeGPUs("gpu1", 8, 1, "MIXED", ("inbox", "profiling", "main"))
    run_cycles(rec, clock, 1200)  # twice its Tprof, nobody waiting in main (gpu1's partition)
    assert slurm.jobs[40].state == "RUNNING" and slurm.jobs[40].partition == "profiling"
    assert not any(c[0] == "requeue" for c in slurm.job_calls(40))
    slurm.submit(50, partition=asked, gpus=8, comment="lucid:noprofile")  # waits: job 40 holds a GPU of gpu1
    run_cycles(rec, clock, 300)
    assert slurm.jobs[50].partition == asked and slurm.jobs[50].state == "PENDING"
    assert not any(c[0] == "requeue" for c in slurm.job_calls(40)), "reclaimed before job 50 waited 600 s"
    run_cycles(rec, clock, 320)
    assert [c[0] for c in slurm.job_calls(40)].count("requeue") == 1
    r = store.job(40)
    assert "kept past Tprof 600 s" in r.profile_reason and "reclaimed" in r.profile_reason, r.profile_reason


SIZE_STUB = r'''
slurm = {SUCCESS=0, ERROR=-1, NO_VAL=4294967294, ESLURM_ACCESS_DENIED=2002, ESLURM_INVALID_NODE_COUNT=2006,
  log_user=function(...) io.stderr:write(string.format(unpack({...}))) end, log_info=function(...) end}
assert(loadstring(io.open(arg[1]):read("*a")))()
-- arg[2]: -p ("" none); arg[3..5]: -N, -n, -c ("" unset, as Slurm leaves them)
local parts = {inbox={state_up=1, total_nodes=4, total_cpus=128}, profiling={state_up=3, total_nodes=4, total_cpus=128},
               main={state_up=3, total_nodes=4, total_cpus=128}, research={state_up=3, total_nodes=2, total_cpus=64},
               empty={state_up=3, total_nodes=0, total_cpus=0}}
local function n(v, unset) if v == "" then return unset end return tonumber(v) end
local job = {partition=(arg[2] ~= "" and arg[2] or nil), script="#!/bin/bash\nsleep 1\n", requeue=65534,
             min_nodes=n(arg[3], slurm.NO_VAL), num_tasks=n(arg[4], slurm.NO_VAL), cpus_per_task=n(arg[5], 65534),
             time_limit=slurm.NO_VAL, het_job_offset=slurm.NO_VAL, immediate=0}
io.write(slurm_job_submit(job, parts, 1000), " ", job.partition or "-", "\n")
'''


@pytest.mark.parametrize("asked,nodes,tasks,cpt,want", [
    ("research", "3", "", "", "2006 research"),  # -N3 on a 2-node partition: refused, as plain Slurm refuses it
    ("research", "2", "", "", "0 inbox"),
    # CPUs are not judged: with --overcommit Slurm takes -n80 on 64 CPUs (a review), and 22.05 does not
    # show job_submit.lua that flag
    ("research", "", "80", "", "0 inbox"),
    ("profiling", "5", "", "", "2006 profiling"),  # only lucidd's own: judged against main, where it goes
    ("research,main", "3", "", "", "0 inbox"),  # main holds it
    ("", "5", "", "", "2006 -"),  # no -p: judged against [slurm] default_partition (main, 4 nodes)
    ("", "4", "", "", "0 -"),
    ("empty", "3", "", "", "0 inbox"),  # a partition without nodes: left to Slurm, as before
    ("main", "", "", "", "0 inbox"),
])
def test_lua_refuses_a_job_no_partition_it_asked_for_can_hold(tmp_path, asked, nodes, tasks, cpt, want):
    """Through the inbox (which holds every node) a job its own partition could never hold was accepted
    and then pended there for ever (PartitionNodeLimit, PartitionConfig: a review, 3 December 2026);
    plain Slurm refuses it at submission, and so does job_submit.lua (version 9)."""
    if shutil.which("lua5.1") is None:
        pytest.skip("lua5.1 not installed (scripts/testcluster.sh install brings it)")
    stub = tmp_path / "size.lua"
    stub.write_text(SIZE_STUB)
    out = subprocess.run(["lua5.1", str(stub), LUA, asked, nodes, tasks, cpt], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == want, (out.stdout, out.stderr)
    if not want.startswith("0 "):
        assert "Requested node configuration is not available" in out.stderr and "partition" in out.stderr
