"""DL2's measured speed table and workload constants, read from a data directory at run time.

The files come from the public DL2 repository (Peng et al., TPDS 2021), which carries no licence:
lucidd never bundles them. `find_data_dir` looks, in order, at an explicit path, the
LUCIDD_DL2_DATA environment variable, `../shared/dl2` beside this checkout and `../shared/dl2`,
`shared/dl2` from the working directory.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError

SPEED_FILE = "config_speed.txt"
WORKLOAD_FILE = "workload.json"


def find_data_dir(path=None) -> Path:
    """The directory holding config_speed.txt and workload.json, or a ConfigError naming where it looked."""
    if path is not None:
        cands = [Path(path)]
    else:
        repo = Path(__file__).resolve().parents[2]
        cands = [Path(p) for p in (os.environ.get("LUCIDD_DL2_DATA"),) if p]
        cands += [repo.parent / "shared" / "dl2", Path.cwd().parent / "shared" / "dl2", Path.cwd() / "shared" / "dl2"]
    for c in cands:
        if (c / SPEED_FILE).is_file() and (c / WORKLOAD_FILE).is_file():
            return c
    where = ", ".join(str(c) for c in cands)
    raise ConfigError(f"DL2 data not found (need {SPEED_FILE} and {WORKLOAD_FILE}; looked in {where}); "
                      "give --dl2-data DIR or set LUCIDD_DL2_DATA (docs/elastic.md)")


@dataclass(frozen=True)
class SpeedRecord:
    model: str
    batch_size: int
    ps: int
    workers: int
    speed: float  # the sum of the per-worker speeds, as DL2's simulator uses it


def read_speed_records(path) -> list[SpeedRecord]:
    """Parse config_speed.txt: one Python tuple a line,
    (model, sync_mode, total_batch_size, num_ps, num_workers, [speed per worker], [ps cpu], [worker cpu])."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = ast.literal_eval(line.strip())
                model, _mode, batch, ps, workers, speeds = rec[:6]
                speed = float(sum(speeds))
                ps, workers = int(ps), int(workers)
            except (ValueError, SyntaxError, TypeError) as exc:
                raise ConfigError(f"{path}, line {n}: not a speed record ({exc})") from None
            if ps < 1 or workers < 1 or not np.isfinite(speed):
                raise ConfigError(f"{path}, line {n}: bad PS/worker count or speed")
            out.append(SpeedRecord(str(model), int(batch), ps, workers, speed))
    if not out:
        raise ConfigError(f"{path}: no speed records")
    return out


@dataclass(frozen=True)
class WorkloadConstants:
    """The numbers of DL2's trace.py / parameters.py (workload.json), per job type in DL2's order."""

    models: tuple
    local_comp_times_s: tuple
    model_sizes_mb: tuple
    epoch_sizes: tuple
    worker_demand: tuple  # per type: (cpu slots, gpu slots)
    ps_demand: tuple
    epoch_fractions: tuple  # job length = fraction x max epochs
    google_arrivals: dict  # peak -> arrivals per slot (75 slots)
    defaults: dict

    @property
    def num_types(self) -> int:
        return len(self.models)


def read_workload(path) -> WorkloadConstants:
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
        n = len(d["models"])
        w = WorkloadConstants(
            models=tuple(d["models"]),
            local_comp_times_s=tuple(float(x) for x in d["local_comp_times_s"]),
            model_sizes_mb=tuple(float(x) for x in d["model_sizes_mb"]),
            epoch_sizes=tuple(int(x) for x in d["epoch_sizes"]),
            worker_demand=tuple(tuple(int(v) for v in x) for x in d["resr_workers_cpu_gpu_slots"]),
            ps_demand=tuple(tuple(int(v) for v in x) for x in d["resr_ps_cpu_gpu_slots"]),
            epoch_fractions=tuple(float(x) for x in d["num_epochs_fraction_of_max"]),
            google_arrivals={int(k): tuple(int(v) for v in vals) for k, vals in d["google_trace_arrivals_by_peak"].items()},
            defaults=dict(d.get("defaults_parameters_py", {})),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not DL2's workload constants ({exc})") from None
    for name in ("epoch_sizes", "worker_demand", "ps_demand", "epoch_fractions"):
        if len(getattr(w, name)) != n:
            raise ConfigError(f"{path}: {name} has {len(getattr(w, name))} entries for {n} models")
    return w


class SpeedTable:
    """speed(model, PS, workers): DL2's measured points, interpolated as DL2's simulator does.

    DL2 sums the per-worker speeds of each measured point and interpolates per model with a
    linear radial basis function, `scipy.interpolate.Rbf(ps, workers, speed, function='linear')`
    (exact at the measured points). Values are cached per integer (PS, workers). `epochs_per_s`
    divides by the job type's epoch size, so that a slot of T seconds advances a job by
    speed x T / epoch_size epochs, as in DL2's job.step()."""

    def __init__(self, records: list[SpeedRecord]):
        from scipy.interpolate import Rbf

        self.points: dict[str, dict[tuple[int, int], float]] = {}
        self.batch_size: dict[str, int] = {}
        for r in records:
            self.points.setdefault(r.model, {})[(r.ps, r.workers)] = r.speed
            self.batch_size.setdefault(r.model, r.batch_size)
        self._rbf = {}
        for model, pts in self.points.items():
            ps, ws = zip(*pts)
            self._rbf[model] = Rbf(np.array(ps, float), np.array(ws, float), np.array(list(pts.values())),
                                   function="linear")
        self._cache: dict[tuple[str, int, int], float] = {}

    @property
    def models(self) -> list[str]:
        return list(self.points)

    def speed(self, model: str, ps: int, workers: int) -> float:
        if ps <= 0 or workers <= 0:
            return 0.0
        key = (model, ps, workers)
        v = self._cache.get(key)
        if v is None:
            try:
                rbf = self._rbf[model]
            except KeyError:
                raise ConfigError(f"speed table has no model '{model}' (it has {', '.join(self.points)})") from None
            v = float(rbf(float(ps), float(workers)))
            self._cache[key] = v
        return v

    def grid(self, model: str, max_ps: int, max_workers: int) -> np.ndarray:
        """speed at every (ps, workers) in 1..max_ps x 1..max_workers, as an array [ps-1, workers-1]."""
        return np.array([[self.speed(model, p, w) for w in range(1, max_workers + 1)] for p in range(1, max_ps + 1)])


_LOADED: dict[str, tuple] = {}


def load(path=None) -> tuple[SpeedTable, WorkloadConstants, Path]:
    """(speed table, workload constants, directory), read once per directory per process."""
    d = find_data_dir(path)
    key = str(d.resolve())
    if key not in _LOADED:
        table = SpeedTable(read_speed_records(d / SPEED_FILE))
        consts = read_workload(d / WORKLOAD_FILE)
        missing = [m for m in consts.models if m not in table.points]
        if missing:
            raise ConfigError(f"{d / SPEED_FILE}: no measured speeds for {', '.join(missing)}")
        _LOADED[key] = (table, consts, d)
    return _LOADED[key]
