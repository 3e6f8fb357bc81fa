"""Elastic (time-slot, parameter-server) mode of the simulator: DL2's workload and its schedulers.

Elastic schedulers (DRF, Tetris, Optimus, DL2) change every running job's number of parameter
servers and workers each time slot. Slurm cannot resize a running job without restarting it, so
these policies live only here, in the simulator (docs/elastic.md):

- `data`      -- finds and reads DL2's measured speed table and workload constants (never bundled).
- `workload`  -- DL2's job generator (8 job types, Google-trace / Poisson arrivals, job lengths).
- `engine`    -- the slot engine: each slot a policy returns an allocation per job, jobs progress
                 by speed(PS, workers) x slot, completions inside a slot are timed finely.
- `policies`  -- DRF, FIFO, SRTF, Tetris and Optimus-oracle as DL2's simulator runs them, and
                 rigid policies (a fixed shape per job).
- `optimus`   -- Optimus with online fitting of its speed model and convergence curve.
- `dl2`       -- the DL2 policy network (optional extra `lucidd[rl]`).
"""
