"""Generator of the bundled synthetic sample trace.

Everything here is made up by this code from a seeded random generator: no third-party trace or
annotation data is used. The result is written in lucidd's generic ``csv`` trace format (see
docs/traces.md) with every optional column filled, together with an artifact-style VC
configuration (``,num`` header; one row per VC: name, number of 8-GPU nodes).

Write a copy with ``python -m lucidd.sample --out DIR`` (``--out`` is required, so the bundled
sample is never overwritten by accident). Regenerate the committed files, from the repository
root, with ``python -m lucidd.sample --out lucidd/data``.

What the sample looks like (seed 7):

* about 2,500 jobs submitted over 7 days (``submit_time`` 0 = a Monday, 00:00), 3 VCs of
  4, 6 and 2 eight-GPU nodes (96 GPUs), about 40 users;
* diurnal and weekday arrival pattern, jobs often submitted in bursts (sweeps), a few exact ties;
* job names drawn from a few per-user name families (``resnet_cifar_lr0.1``, ``bert_ft_seed3``,
  ``debug_tmp`` ...) whose run times are correlated per user and per name, so history and
  name-similarity based predictors have something to learn;
* heavy-tailed durations: many jobs shorter than 5 minutes (debug runs, early failures), most
  GPU time in long multi-GPU training jobs;
* mostly 1-GPU jobs, some 2/4/8 and a few 16/32 (never more than MAX_GPUS of the job's VC);
* GPU demand calibrated to 75 % of each VC's capacity over the week (TARGET_LOAD), so FIFO
  queues form during the day and drain at night and at the weekend;
* final states COMPLETED / FAILED / CANCELLED (TIMEOUT for a job reaching the 48 h cap);
* synthetic workload profiles (model names such as ``cnn-small``, ``transformer-large``; gpu_util
  and gmem_util in %, gmem in MB 500-23,000, amp 0/1, speed in samples/s, batchsize, dataset).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
import pandas as pd

__all__ = ["generate_sample", "sample_vc_config", "write_sample", "SAMPLE_VCS", "TARGET_LOAD"]

DAY = 86_400
N_DAYS = 7
GPUS_PER_NODE = 8
SAMPLE_VCS = {"vcA": 4, "vcB": 6, "vcC": 2}  # VC -> number of 8-GPU nodes
MAX_GPUS = {"vcA": 16, "vcB": 32, "vcC": 4}  # largest job per VC (keeps strict FIFO bounded)
N_USERS = 40
N_JOBS = 2_500
TARGET_LOAD = 0.75  # GPU-seconds demanded / GPU-seconds available over the 7 days, per VC
MAX_DURATION = 2 * DAY

COLUMNS = ("job_id", "user", "vc", "gpu_num", "cpu_num", "state", "name", "submit_time", "duration",
           "model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem")

# Synthetic model profiles: (gpu_util %, gmem_util %, gmem MB at batch 128 fp32, speed samples/s)
MODELS = {
    "cnn-small": (55.0, 30.0, 2600.0, 4200.0),
    "cnn-medium": (70.0, 40.0, 7000.0, 950.0),
    "cnn-large": (86.0, 52.0, 14500.0, 410.0),
    "transformer-small": (66.0, 36.0, 9000.0, 260.0),
    "transformer-medium": (80.0, 46.0, 15500.0, 150.0),
    "transformer-large": (94.0, 61.0, 21000.0, 42.0),
    "lstm-medium": (46.0, 21.0, 4200.0, 1500.0),
    "rl-policy": (16.0, 3.0, 1300.0, 85.0),
    "gan-small": (52.0, 26.0, 3200.0, 1200.0),
    "recsys-mlp": (12.0, 4.0, 1900.0, 30000.0),
}

# Name families. template placeholders are filled from `variants`; `scale` multiplies the run time
# of each variant (e.g. more epochs run longer). `gpus` are (gpu_num, weight) choices.
FAMILIES = {
    "resnet_cifar": dict(template="resnet_cifar_lr{}", variants=["0.1", "0.05", "0.01", "0.001"],
                         scale=[1.0, 1.0, 1.1, 1.3], model="cnn-small", dataset="images-32px",
                         median=2_400, gpus=[(1, 0.8), (2, 0.15), (4, 0.05)], weight=3.0),
    "resnet_imagenet": dict(template="resnet50_imagenet_bs{}", variants=["64", "128", "256"],
                            scale=[1.3, 1.0, 0.8], model="cnn-large", dataset="images-224px",
                            median=30_000, gpus=[(4, 0.3), (8, 0.6), (16, 0.1)], weight=1.0, freq=0.3),
    "vit": dict(template="vit_base_ep{}", variants=["30", "90", "300"], scale=[0.35, 1.0, 3.0],
                model="transformer-medium", dataset="images-224px",
                median=12_000, gpus=[(1, 0.3), (2, 0.3), (4, 0.3), (8, 0.1)], weight=1.2, freq=0.6),
    "bert_ft": dict(template="bert_ft_seed{}", variants=[str(i) for i in range(10)], scale=[1.0] * 10,
                    model="transformer-small", dataset="text-corpus-a",
                    median=3_600, gpus=[(1, 0.7), (2, 0.2), (4, 0.1)], weight=2.5),
    "gpt_pretrain": dict(template="gpt_pretrain_v{}", variants=["1", "2", "3", "4"],
                         scale=[0.6, 1.0, 1.3, 1.6], model="transformer-large", dataset="text-corpus-b",
                         median=40_000, gpus=[(8, 0.45), (16, 0.35), (32, 0.2)], weight=0.5, freq=0.2),
    "lstm_lm": dict(template="lstm_lm_drop{}", variants=["0.1", "0.2", "0.3", "0.5"],
                    scale=[1.0, 1.0, 1.0, 1.0], model="lstm-medium", dataset="text-corpus-a",
                    median=5_400, gpus=[(1, 0.9), (2, 0.1)], weight=1.5),
    "ppo": dict(template="ppo_{}", variants=["atari_s0", "atari_s1", "mujoco_s0", "mujoco_s1", "procgen_s0"],
                scale=[1.0, 1.0, 0.6, 0.6, 1.5], model="rl-policy", dataset="sim-env",
                median=7_200, gpus=[(1, 1.0)], weight=1.5),
    "dcgan": dict(template="dcgan_faces_{}", variants=["v1", "v2", "64px", "final"],
                  scale=[1.0, 1.0, 0.7, 1.5], model="gan-small", dataset="images-64px",
                  median=9_000, gpus=[(1, 0.7), (2, 0.3)], weight=1.0),
    "ncf": dict(template="ncf_rec_dim{}", variants=["16", "32", "64", "128"], scale=[0.8, 1.0, 1.2, 1.5],
                model="recsys-mlp", dataset="clicks-1m", median=1_200, gpus=[(1, 1.0)], weight=1.5),
    "unet_seg": dict(template="unet_seg_fold{}", variants=[str(i) for i in range(5)], scale=[1.0] * 5,
                     model="cnn-medium", dataset="scans-3d",
                     median=8_000, gpus=[(1, 0.5), (2, 0.3), (4, 0.2)], weight=1.0),
}
# Short families that reuse the user's own model (debugging / evaluating their own code).
SHORT_FAMILIES = {
    "debug": dict(template="debug_{}", variants=["tmp", "test", "try2", "fix", "small"], median=90),
    "eval": dict(template="eval_ckpt{}", variants=[str(i) for i in range(1, 13)], median=420),
    "notebook": dict(template="jupyter_{}", variants=["lab", "nb1", "nb2"], median=2_400),
}
DATASET_BATCHES = [32, 64, 128, 256]

# Relative submission rate by hour of day (0..23) and day of week (Mon..Sun).
HOURLY = np.array([0.55, 0.45, 0.35, 0.3, 0.25, 0.25, 0.3, 0.45, 0.8, 1.2, 1.5, 1.55,
                   1.3, 1.45, 1.6, 1.6, 1.55, 1.4, 1.2, 1.1, 1.1, 1.0, 0.9, 0.7])
WEEKDAY = np.array([1.0, 1.05, 1.05, 1.0, 0.95, 0.5, 0.45])


def _choice(rng, pairs):
    values = [v for v, _ in pairs]
    w = np.array([p for _, p in pairs], dtype=float)
    return values[int(rng.choice(len(values), p=w / w.sum()))]


def _make_users(rng):
    """Users with a home VC, an activity weight and a few name families each."""
    vc_names = list(SAMPLE_VCS)
    gpus = np.array([SAMPLE_VCS[v] for v in vc_names], dtype=float)
    # users spread over VCs roughly in proportion to VC size, at least 6 each
    counts = np.maximum(6, np.round(N_USERS * gpus / gpus.sum())).astype(int)
    counts[int(np.argmax(counts))] += N_USERS - counts.sum()
    fam_names = list(FAMILIES)
    fam_w = np.array([FAMILIES[f]["weight"] for f in fam_names])
    users = []
    uid = 0
    for vc, n in zip(vc_names, counts):
        activity = 1.0 / np.arange(1, n + 1) ** 0.9
        rng.shuffle(activity)
        for k in range(n):
            uid += 1
            name = f"u{uid:03d}"
            n_fam = int(rng.integers(1, 4))
            fits = np.array([min(g for g, _ in FAMILIES[f]["gpus"]) <= MAX_GPUS[vc] for f in fam_names])
            w = fam_w * fits
            fams = list(rng.choice(fam_names, size=n_fam, replace=False, p=w / w.sum()))
            families = []
            for f in fams:
                spec = FAMILIES[f]
                allowed = [(g, gw) for g, gw in spec["gpus"] if g <= MAX_GPUS[vc]]
                families.append(dict(
                    family=f, spec=spec,
                    speed_factor=float(rng.lognormal(0.0, 0.6)),  # user-specific run-time scale
                    fav_gpu=_choice(rng, [(g, gw) for g, gw in allowed if g <= 8] or allowed),
                    allowed=allowed,
                    batch=int(rng.choice(DATASET_BATCHES)), amp=int(rng.random() < 0.45),
                    # how often this user submits this family (big runs are submitted rarely)
                    weight=float(rng.uniform(0.5, 2.0)) * spec.get("freq", 1.0),
                ))
            # many users also debug / evaluate / use notebooks
            short = []
            for s, p in (("debug", 0.7), ("eval", 0.35), ("notebook", 0.25)):
                if rng.random() < p:
                    short.append(dict(family=s, spec=SHORT_FAMILIES[s],
                                      speed_factor=float(rng.lognormal(0.0, 0.4)),
                                      weight=float(rng.uniform(0.3, 0.9))))
            users.append(dict(user=name, vc=vc, activity=float(activity[k]), families=families,
                              short=short, cpus_per_gpu=int(rng.choice([2, 4, 6, 8, 12]))))
    return users


def _arrival_times(rng, n):
    """n burst start times (seconds) following the diurnal/weekday profile."""
    minutes = np.arange(N_DAYS * 24 * 60)
    rate = HOURLY[(minutes // 60) % 24] * WEEKDAY[(minutes // (24 * 60)) % 7]
    t = rng.choice(minutes, size=n, p=rate / rate.sum()) * 60 + rng.integers(0, 60, size=n)
    return np.sort(t)


def _profile(rng, model, batch, amp):
    util, mutil, gmem, speed = MODELS[model]
    bs = batch / 128.0
    util = util * (0.85 + 0.15 * min(bs, 2.0))
    gmem = gmem * (0.45 + 0.55 * bs) * (0.7 if amp else 1.0)
    speed = speed * (1.6 if amp else 1.0) * (0.8 + 0.2 * bs)
    jitter = rng.normal(1.0, 0.03, size=4)
    return (
        float(np.clip(util * jitter[0], 0.0, 100.0)),
        float(np.clip(mutil * jitter[1], 0.0, 100.0)),
        float(np.clip(gmem * jitter[2], 500.0, 23_000.0)),
        float(max(speed * jitter[3], 1.0)),
    )


def generate_sample(seed: int = 7) -> pd.DataFrame:
    """The synthetic sample trace as a DataFrame in the generic csv schema (all columns filled).

    Deterministic for a given seed (and numpy version). Rows are sorted by submit_time;
    ``submit_time`` is integer seconds from a Monday 00:00.
    """
    rng = np.random.default_rng(seed)
    users = _make_users(rng)
    total_gpus = sum(SAMPLE_VCS.values())
    records = []
    for vc, nodes in SAMPLE_VCS.items():
        vc_users = [u for u in users if u["vc"] == vc]
        act = np.array([u["activity"] for u in vc_users])
        target = int(round(N_JOBS * nodes / total_gpus))
        n_jobs = 0
        # bursts: a user submits 1..k jobs of one family within a few minutes (a sweep)
        # more burst starts than needed, visited in random order so the week is covered evenly
        starts = rng.permutation(_arrival_times(rng, target))
        for t0 in starts:
            if n_jobs >= target:
                break
            u = vc_users[int(rng.choice(len(vc_users), p=act / act.sum()))]
            pool = u["families"] + u["short"]
            w = np.array([f["weight"] for f in pool])
            fam = pool[int(rng.choice(len(pool), p=w / w.sum()))]
            short = fam["family"] in SHORT_FAMILIES
            if fam["family"] == "notebook" or (not short and fam["fav_gpu"] >= 8):
                k = 1  # big jobs and notebooks come alone
            else:
                k = int(min(rng.geometric(0.45), 8))
            k = min(k, target - n_jobs)
            t = int(t0)
            for j in range(k):
                if j:
                    t += int(rng.choice([0, 0, 1, 2, 5])) if rng.random() < 0.3 else int(rng.exponential(90))
                records.append(_make_job(rng, u, fam, short, t))
                n_jobs += 1

    df = pd.DataFrame.from_records(records)
    df = df[df["submit_time"] < N_DAYS * DAY]

    # Calibrate each VC's demand to TARGET_LOAD by scaling the run times of the "normal"
    # (not short-by-design, not early-failure) jobs; a few rounds because of the MAX_DURATION cap.
    dur = df["duration"].to_numpy(dtype=float)
    gpu = df["gpu_num"].to_numpy(dtype=float)
    scalable_all = df["_scalable"].to_numpy(dtype=bool)
    for vc, nodes in SAMPLE_VCS.items():
        m = (df["vc"] == vc).to_numpy()
        cap = nodes * GPUS_PER_NODE * N_DAYS * DAY
        scalable = m & scalable_all
        for _ in range(4):
            dur = np.clip(dur, 1.0, MAX_DURATION)
            fixed = float((gpu * dur)[m & ~scalable].sum())
            var = float((gpu * dur)[scalable].sum())
            factor = max(TARGET_LOAD * cap - fixed, 0.0) / var if var > 0 else 1.0
            dur[scalable] *= factor
    df["duration"] = np.clip(np.rint(dur), 1, MAX_DURATION).astype(np.int64)
    # jobs that reach the (Slurm-like) time limit are killed by it
    df.loc[df["duration"] >= MAX_DURATION, "state"] = "TIMEOUT"

    df = df.sort_values("submit_time", kind="mergesort").reset_index(drop=True)
    df["job_id"] = (100_001 + np.arange(len(df))).astype(str)
    df["submit_time"] = df["submit_time"].astype(np.int64)
    for c, nd in (("speed", 3), ("gpu_util", 1), ("gmem_util", 1), ("gmem", 0)):
        df[c] = df[c].round(nd)
    return df[list(COLUMNS)].reset_index(drop=True)


def _make_job(rng, u, fam, short, t):
    if short:
        # short families reuse one of the user's real models
        base = u["families"][int(rng.integers(len(u["families"])))]
        spec = fam["spec"]
        variant = int(rng.integers(len(spec["variants"])))
        name = spec["template"].format(spec["variants"][variant])
        model, dataset = base["spec"]["model"], base["spec"]["dataset"]
        batch, amp = base["batch"], base["amp"]
        gpu = 1 if fam["family"] == "notebook" or rng.random() < 0.7 else min(base["fav_gpu"], MAX_GPUS[u["vc"]], 8)
        dur = spec["median"] * fam["speed_factor"] * rng.lognormal(0.0, 0.9)
        r = rng.random()
        if fam["family"] == "debug":
            state = "FAILED" if r < 0.45 else ("CANCELLED" if r < 0.6 else "COMPLETED")
        elif fam["family"] == "notebook":
            state = "CANCELLED" if r < 0.6 else "COMPLETED"
        else:
            state = "FAILED" if r < 0.1 else ("CANCELLED" if r < 0.15 else "COMPLETED")
        scalable = False
    else:
        spec = fam["spec"]
        variant = int(rng.integers(len(spec["variants"])))
        name = spec["template"].format(spec["variants"][variant])
        model, dataset = spec["model"], spec["dataset"]
        batch, amp = fam["batch"], fam["amp"]
        big = max(g for g, _ in fam["allowed"]) >= 16
        gpu = fam["fav_gpu"] if rng.random() < (0.5 if big else 0.7) else _choice(rng, fam["allowed"])
        dur = spec["median"] * spec["scale"][variant] * fam["speed_factor"] * rng.lognormal(0.0, 0.45)
        r = rng.random()
        scalable = True
        if r < 0.13:  # crashes early (bad config, OOM, ...)
            state = "FAILED"
            dur = min(dur, 20 + rng.lognormal(np.log(120), 1.0))
            scalable = False
        elif r < 0.17:  # fails late
            state = "FAILED"
            dur *= rng.uniform(0.1, 0.9)
        elif r < 0.29:  # cancelled by the user
            state = "CANCELLED"
            dur *= rng.uniform(0.02, 1.0)
        else:
            state = "COMPLETED"
    gpu_util, gmem_util, gmem, speed = _profile(rng, model, batch, amp)
    cpu = max(1, gpu * u["cpus_per_gpu"] // (2 if short else 1))
    return dict(
        user=u["user"], vc=u["vc"], gpu_num=int(gpu), cpu_num=int(cpu), state=state, name=name,
        submit_time=int(t), duration=float(max(dur, 1.0)), model=model, dataset=dataset,
        batchsize=int(batch), amp=int(amp), speed=speed, gpu_util=gpu_util, gmem_util=gmem_util,
        gmem=gmem, _scalable=scalable,
    )


def sample_vc_config() -> pd.DataFrame:
    """VC configuration of the sample: index = VC name, column ``num`` = number of 8-GPU nodes."""
    return pd.DataFrame({"num": list(SAMPLE_VCS.values())}, index=list(SAMPLE_VCS))


def write_sample(out_dir, seed: int = 7) -> tuple[pathlib.Path, pathlib.Path]:
    """Write sample_trace.csv and sample_vc_config.csv to out_dir (the bundled copies live in
    lucidd/data)."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "sample_trace.csv"
    vcs = out / "sample_vc_config.csv"
    generate_sample(seed).to_csv(trace, index=False, lineterminator="\n")
    sample_vc_config().to_csv(vcs, lineterminator="\n")
    return trace, vcs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lucidd.sample", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True,
                    help="output folder (required; the bundled sample is lucidd/data, regenerate it with "
                         "--out lucidd/data from the repository root)")
    ap.add_argument("--seed", type=int, default=7, help="random seed (default 7: the bundled sample)")
    args = ap.parse_args(argv)
    try:
        trace, vcs = write_sample(args.out, args.seed)
    except OSError as exc:
        ap.exit(2, f"{ap.prog}: error: --out {args.out}: cannot write there ({exc.strerror or exc})\n")
    df = pd.read_csv(trace)
    print(f"wrote {trace} ({len(df)} jobs) and {vcs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
