-- lucidd: route every new job through the inbox partition (State=DOWN), remembering the
-- partition the user asked for, so lucidd sees each job before Slurm can start it.
--
-- Install beside slurm.conf with `JobSubmitPlugins=lua` (docs/deploy.md). This file belongs to
-- the Slurm configuration, not to lucidd: slurmctld refuses to start if it is missing while
-- the plugin is configured. A runtime error here is logged by slurmctld and the job accepted.
--
-- The requested partition goes into AdminComment as `lucid:partition=NAME` (users cannot edit
-- AdminComment). lucidd and lucidd-failopen move the job there when they release it.

-- lucidd reads this line at its start and warns when the copy beside slurm.conf is older than the
-- one it ships (an upgrade must copy this file again: docs/deploy.md, Upgrading). 2: users may not
-- move jobs into profiling; the users lucidd runs as (LUCIDD_USERS) may move jobs. 3: GPU packing
-- (LUCIDD_PACKING). 4: jobs binding GPUs keep whole GPUs under packing. 5: users may not move jobs
-- into the inbox, nor jobs waiting in profiling out of it; packing keeps interactive, --gpus and
-- --gpus-per-node jobs, scripts whose steps ask for GPUs and lucid:noprofile jobs on their GPUs; the
-- guard on a job of shards holds after packing is turned off, and refuses node count changes. 6: no
-- job is routed while the inbox is not DOWN (lucidd away: lucidd-failopen or lucidd's stop opened
-- it) nor an --immediate one; a partition the user may not use (or that does not exist) is refused
-- at submission, as plain Slurm refuses it; a job without --time gets the DefaultTime of the partition
-- it asked for, not the inbox's. 7: an interactive allocation (salloc, srun outside a job) is left in
-- the partition it asked for, as an --immediate one is: lucidd never profiles it, and in the DOWN
-- inbox it waited for lucidd's next cycle under "srun: Partition in DOWN state", which users took
-- for an error (a review). 8: a job that names or excludes nodes (--nodelist, --exclude) or asks not
-- to be requeued (--no-requeue) is left in its partition: lucidd never profiles it, and routed
-- through the inbox (which holds every node) one Slurm would refuse at submission ("Requested node
-- configuration is not available") was accepted and then pended for ever (a review); users may not
-- turn requeueing off on a job in the inbox or in profiling (its run then stayed in profiling, ahead
-- of every queue, holding the room new jobs wait for: a review). 9: packing keeps --exclusive jobs,
-- and jobs asking for a partition of OverSubscribe=EXCLUSIVE, on their GPU: Slurm 22.05 never starts
-- a job of shards that has its nodes whole (it pended with Resources beside an idle node: a review);
-- a job no partition it asked for can hold (more nodes than it has) is refused at submission, as
-- plain Slurm refuses it (through the inbox it was accepted and pended for ever).
local LUCIDD_LUA_VERSION = 9

-- GPU packing (docs/deploy.md, "GPU packing"): true turns every plain 1-GPU request into 2 shards
-- of one GPU (a GPU of its own, as before), which lucidd may lower to 1 shard (it may then share
-- the GPU) while the job waits. Needs, on every GPU node, one Type per GPU and 2 shards per GPU in
-- gres.conf, `GresTypes=gpu,shard`, and [packing] enabled = true in lucidd.toml. It also stops
-- users changing the GPU request of a pending job: Slurm 22.05 crashes on a shard request that
-- leaves a zero count (../shared/notes: G.3.3), which a user could otherwise cause.
local LUCIDD_PACKING = false
local ONE_GPU = "gres:gpu:1"
local ORIG_TAG = "lucid:orig="

local INBOX = "inbox"   -- keep equal to [slurm] inbox_partition in /etc/lucidd/lucidd.toml
local PROFILING = "profiling"   -- keep equal to [slurm] profiling_partition
local DEFAULT = "main"   -- keep equal to [slurm] default_partition
local TAG = "lucid:partition="

local function unset(v) return v == nil or v == "" end

-- Who may move jobs out of the inbox and into and out of profiling: root and the users lucidd and
-- lucidd-failopen run as (systemd/lucidd.service `User=`: SlurmUser, `slurm` on Debian). Names
-- are looked up in /etc/passwd each time slurmctld loads this file; put a numeric uid in
-- LUCIDD_UIDS for a user that is not a local one. A user missing here gets lucidd's every move
-- refused ("Access/permission denied"), and lucidd stops with that error (docs/deploy.md).
local LUCIDD_USERS = { "slurm" }
local LUCIDD_UIDS = { [0] = true }

local function load_lucidd_uids()
  local f = io.open("/etc/passwd", "r")
  if f == nil then return end
  for line in f:lines() do
    local name, uid = string.match(line, "^([^:]+):[^:]*:(%d+):")
    for _, want in ipairs(LUCIDD_USERS) do
      if name ~= nil and name == want then LUCIDD_UIDS[tonumber(uid)] = true end
    end
  end
  f:close()
end
load_lucidd_uids()

-- whether a GRES/TRES field names `what` ("shard", "gpu") anywhere
local function mentions(v, what) return v ~= nil and string.find(v, what, 1, true) ~= nil end

local function note_admin(job_desc, note)
  if not unset(job_desc.admin_comment) then
    note = job_desc.admin_comment .. " " .. note
  end
  job_desc.admin_comment = note
end

local function set(v) return v ~= nil and v ~= slurm.NO_VAL end
local NO_VAL16 = 65534  -- an unset 16-bit count (slurm.h NO_VAL16), as ntasks_per_tres arrives

-- Whether a batch script asks for GPUs in its own steps (`srun --gres=gpu:1`, `--gpus=1`,
-- `--gpus-per-task=1`, `--cpus-per-gpu=2`, ... outside its #SBATCH lines): inside a job of shards
-- such a step is refused ("Invalid generic resource"), and the job fails (an audit, on the test
-- cluster).
local function steps_ask_for_gpus(script)
  for line in string.gmatch(script or "", "[^\n]+") do
    if not string.find(line, "^%s*#") and (string.find(line, "%-%-gres[= ]%S*gpu")
       or string.find(line, "%-%-gpus") or string.find(line, "%-%-gpu%-") or string.find(line, "%-G%s*%d")
       or string.find(line, "%-per%-gpu")) then  -- --cpus-per-gpu, --mem-per-gpu, --ntasks-per-gpu
      return true
    end
  end
  return false
end

-- Whether the job has its nodes whole: --exclusive (shared 0, JOB_SHARED_NONE; =user is 2, =mcs 3),
-- or a partition it may run in (the ones asked for, else the default) is OverSubscribe=EXCLUSIVE
-- (max_share 0)
local function exclusive(job_desc, part_list)
  if job_desc.shared == 0 then return true end
  if part_list == nil then return false end
  local asked = job_desc.partition
  if unset(asked) or asked == INBOX then asked = DEFAULT end
  for name in string.gmatch(asked, "[^,]+") do
    local p = part_list[name]
    if p ~= nil and p.max_share == 0 then return true end
  end
  return false
end

-- A plain 1-GPU batch request (--gres=gpu:1, one node, no per-GPU CPU or memory, no type, steps that
-- name no GPU) becomes 2 shards of one GPU; anything else is left as it was asked for.
local function to_shards(job_desc, part_list)
  if mentions(job_desc.tres_per_node, "shard") or mentions(job_desc.tres_per_job, "shard")
     or mentions(job_desc.tres_per_task, "shard") or mentions(job_desc.tres_per_socket, "shard") then
    -- Every 1-shard job must be one lucidd judged: a user's own could share a GPU with anyone.
    -- (Shards given per job or per task, or a zero count, also crash slurmctld 22.05: notes G.3.3.)
    slurm.log_user("GPU shards are lucidd's on this cluster: ask for --gres=gpu:1, lucidd shares the GPU when it can")
    return slurm.ERROR
  end
  local tpn, tpj = job_desc.tres_per_node, job_desc.tres_per_job
  local field
  if tpn == ONE_GPU and unset(tpj) then field = "tres_per_node"
  else return slurm.SUCCESS end
  -- Kept on its GPU (an audit on the test cluster: each of these jobs FAILED as shards):
  --  * an interactive allocation (srun, salloc: no script): its step asks for the GPU again, and it
  --    is never profiled, so never lowered;
  --  * --gpus=1 or --gpus-per-node=1: sbatch exports SLURM_GPUS / SLURM_GPUS_PER_NODE, which every
  --    srun in the script reads as a GPU request of its step (--gpus-per-node=1 looks like
  --    --gres=gpu:1 here but for that variable);
  --  * a script whose steps ask for GPUs themselves;
  --  * a job its owner keeps out of profiling (lucid:noprofile): never lowered, nothing to gain.
  local env = job_desc.environment
  if unset(job_desc.script) or steps_ask_for_gpus(job_desc.script)
     or mentions(job_desc.comment, "lucid:noprofile")
     or (type(env) == "table" and (env.SLURM_GPUS_PER_NODE ~= nil or env.SLURM_GPUS ~= nil)) then
    return slurm.SUCCESS
  end
  if not (unset(job_desc.tres_per_task) and unset(job_desc.tres_per_socket)
          and unset(job_desc.cpus_per_tres) and unset(job_desc.mem_per_tres)) then
    return slurm.SUCCESS            -- their per-GPU figures name gpu: Slurm would reject shards
  end
  -- Options that only mean something for a gpu request (tried on Slurm 22.05): with shards,
  -- --gpu-freq and --ntasks-per-gpu are refused at submission ("Invalid generic resource"), and
  -- under --gpu-bind the job's srun steps of two or more tasks get no GPU (CUDA_VISIBLE_DEVICES
  -- empty). Such a job keeps its GPU request.
  if mentions(job_desc.tres_bind, "gpu") or mentions(job_desc.tres_freq, "gpu")
     or (set(job_desc.ntasks_per_tres) and job_desc.ntasks_per_tres ~= NO_VAL16) then
    return slurm.SUCCESS
  end
  local mn = job_desc.min_nodes
  if set(mn) and mn > 1 then return slurm.SUCCESS end
  -- Whole nodes (--exclusive, or a partition of OverSubscribe=EXCLUSIVE): Slurm 22.05 never starts
  -- such a job of shards, not even on an idle node (it pends with Resources for ever), and lucidd
  -- never profiles it, so never lowers it: nothing to gain. (--exclusive=user and =mcs start.)
  if exclusive(job_desc, part_list) then return slurm.SUCCESS end
  job_desc.tres_per_job = ""
  job_desc.tres_per_node = "gres:shard:2"
  note_admin(job_desc, ORIG_TAG .. field .. "=" .. ONE_GPU)
  return slurm.SUCCESS
end

-- Whether new jobs go through the inbox: only while it is DOWN (state_up 1, PARTITION_SUBMIT alone).
-- UP, lucidd is away (lucidd-failopen, or lucidd's own stop, opened it so that Slurm schedules
-- alone): a job routed there would run in the inbox itself, on nodes outside the partition it
-- asked for, under the inbox's limits, until the next fail-open run moved it (a review).
local function routing(part_list)
  local inbox = part_list ~= nil and part_list[INBOX] or nil
  if inbox == nil then return true end   -- not the user's to see (AllowGroups): as before
  local state = inbox.state_up
  return state == nil or state == 1
end

-- `srun -I` / `salloc -I` (--immediate): Slurm must start it within those seconds or it fails, and
-- lucidd releases the inbox only at its next cycle (`Partition in DOWN state`, seen on 22.05)
local function immediate(job_desc)
  local v = job_desc.immediate
  return v ~= nil and v ~= 0 and v ~= slurm.NO_VAL
end

-- salloc, or srun outside a job: no batch script. Slurm requeues only batch jobs, so lucidd never
-- profiles these, and orders them where they are. A heterogeneous job's components after the first
-- have no script either (seen on 22.05: het_job_offset 1, no script): they are routed with their
-- leader, whose moves lucidd makes component by component.
local function interactive(job_desc)
  return unset(job_desc.script) and not set(job_desc.het_job_offset)
end

-- Jobs lucidd never profiles, whose checks at submission Slurm makes against the partition a job is
-- submitted to: --nodelist and --exclude (checked against the inbox, which holds every node, a node
-- outside the asked-for partition passed, and the job pended there for ever with BadConstraints),
-- and --no-requeue (Slurm could not restart it after profiling). Left in their partition, as plain
-- Slurm takes them; lucidd orders them there.
local function never_profiled(job_desc)
  return not unset(job_desc.req_nodes) or not unset(job_desc.exc_nodes) or job_desc.requeue == 0
end

-- The first name of a partition list that Slurm would refuse: no such partition, or one the user may
-- not use (part_list holds those the user may; names are case-sensitive, as Slurm's are). Routed into
-- the inbox, such a job was accepted and then waited there for ever, its move refused.
local function refused_name(asked, part_list)
  if part_list == nil then return nil end
  for name in string.gmatch(asked, "[^,]+") do
    if part_list[name] == nil then return name end
  end
  return nil
end

-- Slurm gives a job without --time its partition's DefaultTime at submission, and keeps it when the
-- job is moved: submitted to the inbox it would get the inbox's (none: the MaxTime of where it runs)
-- instead of the one of the partition lucidd releases it to (`part`, the first of a list, as Slurm
-- takes it)
local function default_time_of(job_desc, part_list, part)
  local p = part_list ~= nil and part ~= nil and part_list[part] or nil
  local t = p ~= nil and p.default_time or nil
  if not set(job_desc.time_limit) and t ~= nil and t ~= slurm.NO_VAL then
    job_desc.time_limit = t
  end
end

-- Why no partition of the list `asked` can ever hold the job (nil: one can, or part_list does not
-- say): more nodes (-N) than the partition has. Plain Slurm refuses such a job at submission ("Node
-- count specification invalid"); routed into the inbox, which holds every node, it was accepted and
-- then pended for ever in its partition (PartitionNodeLimit: a review). CPUs are not judged here:
-- with --overcommit Slurm takes more tasks than CPUs, and 22.05 does not show job_submit.lua that flag.
local function no_partition_holds(job_desc, part_list, asked)
  if part_list == nil then return nil end
  local nodes = job_desc.min_nodes
  if not set(nodes) then return nil end
  local why = nil
  for name in string.gmatch(asked, "[^,]+") do
    local p = part_list[name]
    local have_nodes = p ~= nil and tonumber(p.total_nodes) or nil
    if have_nodes == nil or have_nodes < 1 then
      return nil  -- not known (or an empty partition, which Slurm itself judges): not refused here
    end
    if nodes <= have_nodes then return nil end
    why = string.format("%d nodes asked for, partition %s has %d", nodes, name, have_nodes)
  end
  return why, slurm.ESLURM_INVALID_NODE_COUNT or slurm.ERROR
end

-- `asked` without lucidd's own partitions: left to Slurm, a job must not go into profiling (it runs
-- ahead of every queue) nor run in the inbox itself (on every node, under the inbox's limits)
local function without_lucidds(asked)
  local keep = {}
  for p in string.gmatch(asked or "", "[^,]+") do
    if p ~= INBOX and p ~= PROFILING then keep[#keep + 1] = p end
  end
  return table.concat(keep, ",")
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  if LUCIDD_PACKING then
    local rc = to_shards(job_desc, part_list)
    if rc ~= slurm.SUCCESS then return rc end
  end
  local asked = job_desc.partition
  if not routing(part_list) or immediate(job_desc) or interactive(job_desc) or never_profiled(job_desc) then
    -- left to Slurm, in the partition it asked for; one that asked for none (or only lucidd's) goes
    -- to the partition lucidd would release it to, not to the default one (the inbox)
    local own = without_lucidds(asked)
    if own ~= "" then
      job_desc.partition = own
    elseif part_list ~= nil and part_list[DEFAULT] ~= nil then
      job_desc.partition = DEFAULT
    end
    return slurm.SUCCESS
  end
  if unset(asked) or asked == INBOX then
    local too_big, code = no_partition_holds(job_desc, part_list, DEFAULT)
    if too_big ~= nil then
      slurm.log_user("Requested node configuration is not available (%s)", too_big)
      return code
    end
    default_time_of(job_desc, part_list, DEFAULT)
    return slurm.SUCCESS            -- the default partition is the inbox already
  end
  local bad = refused_name(asked, part_list)
  if bad ~= nil then
    -- a format string: the name is an argument, never part of it (`-p 'gpu%d'` broke the message)
    slurm.log_user("invalid partition specified: '%s' (no such partition, or not one you may use)", bad)
    return slurm.ESLURM_INVALID_PARTITION_NAME or slurm.ERROR
  end
  local own = without_lucidds(asked)
  local too_big, code = no_partition_holds(job_desc, part_list, own ~= "" and own or DEFAULT)
  if too_big ~= nil then
    slurm.log_user("Requested node configuration is not available (%s)", too_big)
    return code
  end
  local released = string.match(without_lucidds(asked), "^[^,]+")
  default_time_of(job_desc, part_list, released or DEFAULT)
  note_admin(job_desc, TAG .. asked)
  job_desc.partition = INBOX
  return slurm.SUCCESS
end

local function names(list, name)
  for p in string.gmatch(list or "", "[^,]+") do
    if p == name then return true end
  end
  return false
end

-- Slurm 22.05 drops log_user() messages in job_modify: the user sees the error code's text
-- ("Access/permission denied"), and slurmctld's log says why.
local function refuse(why)
  slurm.log_info("lucidd job_submit.lua: refused a user's partition change: %s", why)
  return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  -- A job of shards: on while packing is on, and for the jobs it converted after it is turned off
  -- (their shards stay until they end: docs/deploy.md, "Turning it off")
  local holds_shards = mentions(job_rec.tres_per_node, "shard")
  local of_shards = LUCIDD_PACKING or holds_shards or mentions(job_rec.admin_comment, ORIG_TAG)
  if of_shards and not LUCIDD_UIDS[modify_uid] and (job_desc.tres_per_node ~= nil
     or job_desc.tres_per_job ~= nil or job_desc.tres_per_task ~= nil or job_desc.tres_per_socket ~= nil) then
    -- a user's GRES change can leave a zero shard count, which crashes slurmctld 22.05 (notes G.3.3)
    slurm.log_info("lucidd job_submit.lua: refused a user's GPU request change (a job of GPU shards)")
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
  end
  -- its shards are per node: more nodes would share a GPU on each, unjudged (an audit)
  local more_nodes = (set(job_desc.min_nodes) and job_desc.min_nodes > 1)
                     or (set(job_desc.max_nodes) and job_desc.max_nodes > 1)
  if holds_shards and more_nodes and not LUCIDD_UIDS[modify_uid] then
    slurm.log_info("lucidd job_submit.lua: refused a user's node count change (a job of GPU shards)")
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
  end
  -- `scontrol update jobid=N requeue=0` by its owner while lucidd profiles it: lucidd's requeue at
  -- Tprof is refused, and the run stays in profiling to its end, ahead of every queue and holding
  -- the room new jobs wait for (a review); submitted with --no-requeue, a job is never profiled
  if job_desc.requeue == 0 and not LUCIDD_UIDS[modify_uid]
     and (job_rec.partition == INBOX or job_rec.partition == PROFILING) then
    slurm.log_info("lucidd job_submit.lua: refused a user's requeue=0 on a job in '%s'", job_rec.partition)
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
  end
  if LUCIDD_UIDS[modify_uid] or unset(job_desc.partition) then
    return slurm.SUCCESS
  end
  -- A user moving a pending job out of the inbox would bypass lucidd (and its profiling).
  if job_rec.partition == INBOX then
    return refuse("lucidd manages the partition of jobs waiting in '" .. INBOX ..
                  "'; cancel and resubmit with -p to change it")
  end
  -- A job waiting in profiling goes to its partition within 2 x Tprof; moved out by its owner, it
  -- would keep the ExcNodeList lucidd may have set there (which names its own partition's nodes)
  -- while lucidd is not running to clear it (an audit).
  if job_rec.partition == PROFILING then
    return refuse("lucidd moves jobs waiting in '" .. PROFILING .. "' to their partition")
  end
  -- Profiling runs before every queue (PriorityTier) and lucidd requeues what it did not admit
  -- there: a user's move into it would jump every queue (a --no-requeue job for good).
  if names(job_desc.partition, PROFILING) then
    return refuse("only lucidd moves jobs into '" .. PROFILING .. "'")
  end
  -- The inbox is DOWN while lucidd runs, and lucidd sends on only the jobs it routes through it:
  -- a job moved back into it (it is the default partition) would wait there (an audit).
  if names(job_desc.partition, INBOX) then
    return refuse("only lucidd moves jobs into '" .. INBOX .. "'; submit with -p to choose a partition")
  end
  return slurm.SUCCESS
end

return slurm.SUCCESS
