"""The NVML sampler and the packing decision on a real GPU, end to end. Needs a GPU and PyTorch.

    python bench/nvml_on_gpu.py [--seconds 10] [--alone KINDS] [--pairs A+B,...] [--out DIR] [--pid-namespaces]

What a GPU node does for lucidd, without Slurm: PyTorch processes stand in for jobs (each has
`SLURM_JOB_ID` and `SLURM_JOB_PARTITION` in its environment, as a Slurm job's processes do; with
no job cgroup, the sampler finds the job there), and the real `lucidd-sampler` service
(profiler/sampler_main.py) runs beside them against the real NVML, writing to a SQLite database.

Phases, one after another (by default; --alone and --pairs name others, from KINDS below):
  alone, partition `profiling`: a Tiny job (small kernels, mostly idle), a Medium one (big
      kernels about 45 % of the time), a Jumbo one (big kernels back to back): their profiling runs;
  pairs, partition `main`: two jobs on the one GPU at once, as shards put them, each pair's
      speeds against the same jobs alone.
The figures in docs/deploy.md ("Measured on an H200") came from the default run and from
  --seconds 6 --alone mlp,r18,r18io,r50,b10,b20 --pairs mlp+mlp,r18io+r18io,r18io+r18,r18+r18,r18+r50,b10+b10,b20+b20
Then lucidd's side: the profiling runs' rows read back as lucidd reads them
(Store.profiling_gpu_profiles) and judged by binder/live.py's packing test with the GPU's real
memory. Printed: NVML's view (driver, GPUs, PIDs the driver gives against the workers' own), the
sampler's per-job figures, the packing decisions, the co-location speeds, and the cost of one
reading. Figures, not a test: the output goes in the session's note and docs/deploy.md.

--pid-namespaces runs each stand-in in a PID namespace of its own, with its own /proc (`unshare
--pid --fork --mount-proc`, as a container without the host's PIDs holds a job; without its own
/proc, CUDA fails to start there, error 304, on an H200 with driver 580): the sampler, on the
host, must still find it by the PID NVML gives. It also runs a second `lucidd-sampler --once` in a
PID namespace of its own (with its own /proc), which must warn that it cannot find jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Stand-in jobs. burst:SIDE:BUSY_MS:IDLE_MS:GIB: bf16 products of SIDE x SIDE matrices for about
# BUSY_MS, then IDLE_MS of host time (data loading), holding GIB of GPU memory.
# model:NAME:BATCH:IDLE_MS: training steps of a torchvision model (or `mlp`) on random data, then
# IDLE_MS of host time.
KINDS = {
    "tiny": "burst:1024:0:20:2",
    "medium": "burst:8192:9:11:16",
    "jumbo": "burst:8192:20:0:48",
    "b10": "burst:4096:2:18:1",  # kernels about 10 % of the time
    "b20": "burst:4096:4:16:1",
    "mlp": "model:mlp:64:0",  # a small MLP: launch-bound
    "r18": "model:resnet18:32:0",
    "r18io": "model:resnet18:32:30",  # ... waiting 30 ms per step for its input
    "r50": "model:resnet50:64:0",
}
DEFAULT_ALONE = "tiny,medium,jumbo"
DEFAULT_PAIRS = "tiny+medium,medium+medium,medium+jumbo,jumbo+jumbo"


def _burst_step(torch, side, busy_ms, gib):
    dev = torch.device("cuda")
    ballast = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=dev)
    a = torch.randn(side, side, dtype=torch.bfloat16, device=dev)
    b = torch.randn(side, side, dtype=torch.bfloat16, device=dev)
    for _ in range(3):  # warm-up: cuBLAS's first call sets itself up
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    one = max((time.perf_counter() - t0) / 10, 1e-6)
    n = max(1, int(busy_ms / 1000 / one))  # products per burst, timed alone

    def step():
        for _ in range(n):
            a @ b
        return ballast

    return step


def _model_step(torch, name, batch):
    import torch.nn.functional as F

    dev = torch.device("cuda")
    if name == "mlp":
        m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU()) for _ in range(4)],
                                torch.nn.Linear(1024, 10)).to(dev)
        x = torch.randn(batch, 1024, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
    else:
        import torchvision

        m = getattr(torchvision.models, name)(num_classes=1000).to(dev)
        x = torch.randn(batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    return step


def worker(kind: str, seconds: float, out: str, go: str) -> None:
    """One stand-in job: iterations of GPU work then idle time (host work: data loading)."""
    import torch

    spec = KINDS.get(kind, kind).split(":")
    idle_ms = float(spec[3])  # IDLE_MS, fourth in both forms (burst:SIDE:BUSY_MS:IDLE_MS:GIB, model:NAME:BATCH:IDLE_MS)
    if spec[0] == "burst":
        step = _burst_step(torch, int(spec[1]), float(spec[2]), float(spec[4]))
    else:
        step = _model_step(torch, spec[1], int(spec[2]))
    torch.cuda.synchronize()
    Path(out + ".ready").write_text("")
    Path(out[:-len(".json")] + ".pid").write_text(json.dumps({"pid": os.getpid()}))
    while not os.path.exists(go):
        time.sleep(0.05)
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        torch.cuda.synchronize()
        if idle_ms:
            time.sleep(idle_ms / 1000)
        iters += 1
    took = time.perf_counter() - start
    Path(out).write_text(json.dumps({"kind": kind, "iters": iters, "seconds": took, "rate": iters / took,
                                     "pid": os.getpid()}))


def _unshare(pid_ns: bool, mount_proc: bool = False) -> list:
    """The command prefix that starts a process in a PID namespace of its own (as root; else in a
    user namespace too, where the kernel allows it), or none."""
    if not pid_ns:
        return []
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", *(["--mount-proc"] if mount_proc else [])]


def run_phase(name, jobs, partition, seconds, tmp, watch=None, pid_ns=False):
    """jobs: [(job_id, kind)]. Starts them, releases them together, waits; {job_id: result}.
    pid_ns: each job in a PID namespace of its own (its result's `pid` is then the one it sees)."""
    go = os.path.join(tmp, f"go-{name}")
    procs = []
    for job_id, kind in jobs:
        env = dict(os.environ, SLURM_JOB_ID=str(job_id), SLURM_JOB_PARTITION=partition)
        out = os.path.join(tmp, f"{name}-{job_id}.json")
        procs.append((job_id, out, subprocess.Popen(
            [*_unshare(pid_ns, mount_proc=True), sys.executable, __file__, "--worker", kind, "--seconds", str(seconds),
             "--result", out, "--go", go],
            env=env)))
    deadline = time.time() + 120
    while not all(os.path.exists(o + ".ready") or p.poll() is not None for _, o, p in procs):
        if time.time() > deadline:
            break
        time.sleep(0.1)
    Path(go).write_text("")
    if watch:
        watch([p.pid for _, _, p in procs])
    results = {}
    for job_id, out, p in procs:
        p.wait(timeout=seconds + 120)
        results[job_id] = json.loads(Path(out).read_text()) if os.path.exists(out) else None
    return results


def _version(dist):
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="each phase's timed run")
    p.add_argument("--interval", type=float, default=0.5,
                   help="the sampler's [sampler] interval_s (>= 0.1); a phase needs 3 readings to be judged")
    p.add_argument("--out", default="", help="a folder to copy the sampler's SQLite database to")
    p.add_argument("--alone", default=DEFAULT_ALONE, help="kinds profiled alone (names of KINDS, or specs)")
    p.add_argument("--pairs", default=DEFAULT_PAIRS, help="pairs run together: A+B,...")
    p.add_argument("--pid-namespaces", action="store_true",
                   help="each stand-in in a PID namespace of its own (unshare), and a second sampler --once in one")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one stand-in job (this script runs itself)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.seconds, args.result, args.go)
        return 0

    if args.pid_namespaces:
        try:
            probe = subprocess.run([*_unshare(True, mount_proc=True), "true"], capture_output=True, text=True)
            why = "" if probe.returncode == 0 else ((probe.stderr or probe.stdout).strip()[-300:]
                                                    or f"rc {probe.returncode}")
        except OSError as exc:  # no unshare (util-linux)
            why = str(exc)
        if why:
            print("--pid-namespaces: cannot start a PID namespace here (unshare):", why)
            return 2

    import pynvml

    from binder.live import LivePackingConfig, packing_test, with_gpu_memory
    from lucidd.live.store import Store
    from profiler.nvml_sampler import Sampler, in_host_pid_namespace, process_record_problem, read_gpus

    tmp = tempfile.mkdtemp(prefix="lucidd-nvml-")
    db = os.path.join(tmp, "lucidd.db")
    cfg_path = os.path.join(tmp, "lucidd.toml")
    Path(cfg_path).write_text(f'[database]\nurl = "sqlite:///{db}"\n\n[sampler]\ninterval_s = {args.interval:g}\nflush_s = 2\n'
                              'node = "gpu01"\n')

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = pynvml.nvmlDeviceGetName(h)
    total_mib = pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20
    print(f"NVML: driver {pynvml.nvmlSystemGetDriverVersion()}, nvidia-ml-py {_version('nvidia-ml-py')}, "
          f"{pynvml.nvmlDeviceGetCount()} GPU(s); GPU 0 {name}, {total_mib:,.0f} MiB")
    print(f"host PID namespace: {in_host_pid_namespace()}; process record problem: {process_record_problem(pynvml)}")
    try:
        print("MIG mode:", pynvml.nvmlDeviceGetMigMode(h))
    except pynvml.NVMLError as exc:
        print("MIG mode:", exc)

    sampler = subprocess.Popen([sys.executable, "-m", "profiler.sampler_main", "--config", cfg_path],
                               cwd=str(REPO), stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    if sampler.poll() is not None:
        print("lucidd-sampler exited", sampler.returncode, sampler.stderr.read())
        return 1

    timings = []

    def watch(pids):
        """During the Jumbo profiling run: what NVML says about processes, and one reading's cost."""
        time.sleep(min(3.0, args.seconds / 2))
        s = Sampler(pynvml, "probe")
        t0 = time.perf_counter()
        for _ in range(20):
            s.sample(int(time.time()))
        timings.append((time.perf_counter() - t0) / 20)
        r = read_gpus(pynvml)
        print(f"  workers' PIDs {pids}; NVML's processes on GPU 0: {r[0].processes if r else None}; "
              f"utilisation {r[0].gpu_util if r else None} %")
        once = subprocess.run([sys.executable, "-m", "profiler.sampler_main", "--config", cfg_path, "--once"],
                              cwd=str(REPO), capture_output=True, text=True)
        print("  lucidd-sampler --once:", once.returncode, once.stdout.strip() or once.stderr.strip()[-400:])
        if args.pid_namespaces:
            # the jobs' own view of their PIDs, against NVML's above
            # the PIDs above are unshare's; each worker is its child
            kids = []
            for pid in pids:
                try:
                    kids += Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                except OSError:
                    pass
            mine = sorted(Path(tmp).glob("*.pid"), key=os.path.getmtime)[-len(pids):]
            own = [json.loads(f.read_text()).get("pid") for f in mine]
            print(f"  the workers' host PIDs (unshare's children) {kids}; their PIDs in their own namespaces {own}")
            boxed = subprocess.run([*_unshare(True, mount_proc=True), sys.executable, "-m", "profiler.sampler_main",
                                    "--config", cfg_path, "--once"], cwd=str(REPO), capture_output=True, text=True)
            print("  lucidd-sampler --once in a PID namespace of its own:", boxed.returncode,
                  "| stdout:", boxed.stdout.strip()[-300:] or "(none)")
            for line in boxed.stderr.strip().splitlines()[-4:]:
                print("    |", line[-300:])

    alone_kinds = [k for k in args.alone.split(",") if k]
    pair_kinds = [tuple(x.split("+", 1)) for x in args.pairs.split(",") if x]
    for x, y in pair_kinds:
        for k in (x, y):
            if k not in alone_kinds:
                alone_kinds.append(k)  # a pair's speeds are against the same job alone
    alone_ids = {kind: 101 + n for n, kind in enumerate(alone_kinds)}
    alone = {}
    for kind, job_id in alone_ids.items():
        print(f"profiling run: job {job_id} ({kind}) alone, {args.seconds:g} s")
        alone[kind] = run_phase(f"alone-{job_id}", [(job_id, kind)], "profiling", args.seconds, tmp,
                                watch if job_id == 101 + len(alone_ids) - 1 else None, args.pid_namespaces)[job_id]
    pairs = {}
    for k, (x, y) in enumerate(pair_kinds):
        a, b = 201 + 2 * k, 202 + 2 * k
        print(f"pair: job {a} ({x}) with job {b} ({y}), {args.seconds:g} s")
        pairs[(x, y)] = run_phase(f"pair-{k}", [(a, x), (b, y)], "main", args.seconds, tmp,
                                  pid_ns=args.pid_namespaces)
    time.sleep(3)  # a last flush
    sampler.send_signal(signal.SIGTERM)
    try:
        _, err = sampler.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        sampler.kill()
        _, err = sampler.communicate()
    print(f"lucidd-sampler stopped: rc {sampler.returncode}; its log:")
    for line in (err or "").strip().splitlines()[-15:]:
        print("  |", line)

    store = Store(f"sqlite:///{db}")
    # the shipped defaults, gpu_memory_mib 0 included: the GPU's memory from the sampler's heartbeat
    beat = store.gpu_nodes().get("gpu01")
    print("\nThe sampler's heartbeat (table gpu_nodes): " + (
        "none" if beat is None else f"{beat.gpus} GPU(s) {beat.gpu_name}, the smallest "
        f"{beat.gpu_memory_mib or 0:,.0f} MiB (nvidia-smi: {total_mib:,.0f}), driver {beat.driver}"))
    pcfg = with_gpu_memory(LivePackingConfig(), "profiling",
                           {"profiling": {"gpu01": beat.gpu_memory_mib if beat is not None else None}})
    print("What lucidd reads (profiling runs) and binder/live.py's packing test (gpu_memory_mib "
          f"{pcfg.gpu_memory_mib:.0f}, headroom {pcfg.memory_headroom_mib:.0f}, GSS {pcfg.gss}, rule: Tiny < "
          f"{pcfg.tiny_below_util:g} %, Jumbo >= {pcfg.jumbo_from_util:g} %):")
    rows = store.profiling_gpu_profiles(list(alone_ids.values()), "profiling")
    util = {}
    for kind, job_id in alone_ids.items():
        row = rows.get(job_id)
        if row is None or row.gpu_util is None:
            seen = "" if row is None else f" ({row.samples} samples)"
            print(f"  job {job_id} ({kind}): no utilisation figures{seen}")
            continue
        util[kind] = row.gpu_util
        score, how, blocker = packing_test(row, pcfg)
        print(f"  job {job_id} ({kind}): samples {row.samples}, util readings {row.util_samples}, gpu_util "
              f"{row.gpu_util:.1f} %, gmem_util {row.gmem_util:.1f} %, gmem {row.gmem_mib:,.0f} MiB, GPUs {row.gpus}")
        print(f"      -> keeps its GPU: {blocker}" if blocker else f"      -> {how}; may share")
    print("\nThe pairs' rows (a GPU two jobs share gives them memory figures only):")
    for k in range(len(pair_kinds)):
        for job_id in (201 + 2 * k, 202 + 2 * k):
            for row in store.gpu_profiles(job_id):
                print(f"  job {job_id} ({row.partition}): samples {row.samples}, util readings {row.util_samples}, "
                      f"gmem {row.gmem_mib if row.gmem_mib is None else round(row.gmem_mib)} MiB")

    print("\nCo-location speeds (iterations/s beside the other job / alone), and 1 / (1 + the other's "
          "utilisation alone), time-slicing's estimate:")
    for (x, y), res in pairs.items():
        a, b = sorted(res)
        ra, rb = res[a], res[b]
        if not (ra and rb and alone.get(x) and alone.get(y)):
            print(f"  {x} + {y}: a worker failed")
            continue
        sx, sy = ra["rate"] / alone[x]["rate"], rb["rate"] / alone[y]["rate"]
        est = (f"  (est. {1 / (1 + util[y] / 100):.3f} and {1 / (1 + util[x] / 100):.3f})"
               if x in util and y in util else "")
        print(f"  {x} + {y}: {sx:.3f} and {sy:.3f}{est}")
    for kind, r in alone.items():
        print(f"  alone {kind}: {r['rate']:.1f} it/s" if r else f"  alone {kind}: failed")
    if timings:
        print(f"\none sampler reading (read_gpus + job lookup), mean of 20 while a job ran: {timings[0] * 1000:.2f} ms")
    pynvml.nvmlShutdown()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        subprocess.run(["cp", db, args.out])
    return 0


if __name__ == "__main__":
    sys.exit(main())
