-- lucidd: route every new job through the inbox partition (State=DOWN), remembering the
-- partition the user asked for, so lucidd sees each job before Slurm can start it.
--
-- Install beside slurm.conf with `JobSubmitPlugins=lua` (docs/deploy.md). This file belongs to
-- the Slurm configuration, not to lucidd: slurmctld refuses to start if it is missing while
-- the plugin is configured. A runtime error here is logged by slurmctld and the job accepted.
--
-- The requested partition goes into AdminComment as `lucid:partition=NAME` (users cannot edit
-- AdminComment). lucidd and lucidd-failopen move the job there when they release it.

local INBOX = "inbox"   -- keep equal to [slurm] inbox_partition in /etc/lucidd/lucidd.toml
local TAG = "lucid:partition="

local function unset(v) return v == nil or v == "" end

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

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  -- A user moving a pending job out of the inbox would bypass lucidd (and its profiling).
  if modify_uid ~= 0 and not unset(job_desc.partition) and job_rec.partition == INBOX then
    slurm.log_user("lucidd manages the partition of jobs waiting in '" .. INBOX ..
                   "'; cancel and resubmit with -p to change it")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

return slurm.SUCCESS
