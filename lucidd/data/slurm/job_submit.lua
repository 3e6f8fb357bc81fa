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
-- move jobs into profiling; the users lucidd runs as (LUCIDD_USERS) may move jobs.
local LUCIDD_LUA_VERSION = 2

local INBOX = "inbox"   -- keep equal to [slurm] inbox_partition in /etc/lucidd/lucidd.toml
local PROFILING = "profiling"   -- keep equal to [slurm] profiling_partition
local TAG = "lucid:partition="

local function unset(v) return v == nil or v == "" end

-- Who may move jobs out of the inbox and into profiling: root and the users lucidd and
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

function slurm_job_submit(job_desc, part_list, submit_uid)
  local asked = job_desc.partition
  if unset(asked) or asked == INBOX then
    return slurm.SUCCESS            -- the default partition is the inbox already
  end
  local note = TAG .. asked
  if not unset(job_desc.admin_comment) then
    note = job_desc.admin_comment .. " " .. note
  end
  job_desc.admin_comment = note
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
  if LUCIDD_UIDS[modify_uid] or unset(job_desc.partition) then
    return slurm.SUCCESS
  end
  -- A user moving a pending job out of the inbox would bypass lucidd (and its profiling).
  if job_rec.partition == INBOX then
    return refuse("lucidd manages the partition of jobs waiting in '" .. INBOX ..
                  "'; cancel and resubmit with -p to change it")
  end
  -- Profiling runs before every queue (PriorityTier) and lucidd requeues what it did not admit
  -- there: a user's move into it would jump every queue (a --no-requeue job for good).
  if names(job_desc.partition, PROFILING) then
    return refuse("only lucidd moves jobs into '" .. PROFILING .. "'")
  end
  return slurm.SUCCESS
end

return slurm.SUCCESS
