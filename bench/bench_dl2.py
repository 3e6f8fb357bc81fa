"""Train DL2 (supervised warm-up on DRF, then actor-critic RL) on the dl2 workload and evaluate it on
the 10 held-apart validation traces of bench/bench_elastic.py (seed 9973); prints the learning curve,
the training time, and the checks of issue 13. Needs PyTorch (pip install 'lucidd[rl]').

Training traces: drawn from seed 1 (never the validation seed). The trained policy is written to
--out (default dl2-policy.npz), evaluable with
  lucidctl simulate --workload dl2 --policies drf,optimus-oracle,dl2 --dl2-model dl2-policy.npz
and a torch checkpoint beside it (.pt) that `--resume` continues from.

Run: .venv/bin/python bench/bench_dl2.py [--minutes 25] [--out dl2-policy.npz] [--reward marginal]

The default reward is "marginal-remaining" (each action gets the progress it added to its job in
the slot / the epochs the job had left); `--reward marginal` trains on DL2's own reward (progress /
the job's epochs) split the same way, `--reward slot` as DL2's code does (docs/elastic.md).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lucidd.elastic.dl2_train import Trainer, TrainConfig  # noqa: E402
from lucidd.elastic.experiment import make_elastic_experiment  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=25.0, help="wall-clock budget of the RL phase")
    ap.add_argument("--sl-traces", type=int, default=10)
    ap.add_argument("--sl-steps", type=int, default=3000)
    ap.add_argument("--train-traces", type=int, default=100)
    ap.add_argument("--val-traces", type=int, default=10)
    ap.add_argument("--select-traces", type=int, default=5,
                    help="traces of seed 2 on which the policy kept is chosen (0: choose on the validation traces)")
    ap.add_argument("--eval-every", type=int, default=40, help="RL episodes between validations")
    ap.add_argument("--rl-lr", type=float, default=3e-4)
    ap.add_argument("--explore", type=float, default=TrainConfig.explore)
    ap.add_argument("--reward", choices=["slot", "job", "marginal", "marginal-remaining"], default="marginal-remaining",
                    help="the reward and how it reaches each action (dl2_train.TrainConfig; 'marginal' is DL2's "
                         "reward, 'slot' and 'job' also DL2's credit)")
    ap.add_argument("--raw-advantage", action="store_true",
                    help="do not divide the advantage by its batch's std (the default for the marginal rewards)")
    ap.add_argument("--entropy-weight", type=float, default=TrainConfig.entropy_weight)
    ap.add_argument("--out", default="dl2-policy.npz")
    ap.add_argument("--resume", help="a .pt checkpoint to continue from (skips the SL phase)")
    args = ap.parse_args()

    t_start = time.process_time()
    w0 = time.perf_counter()
    val = make_elastic_experiment(seed=9973, n_traces=args.val_traces)
    train = make_elastic_experiment(seed=1, n_traces=args.train_traces)
    # the kept policy is chosen on its own traces, so that the validation figure is not the best of
    # many looks at the validation traces
    select = make_elastic_experiment(seed=2, n_traces=args.select_traces) if args.select_traces else None
    drf = np.mean([val.run("drf", i).avg_jct_slots() for i in range(args.val_traces)])
    oracle = np.mean([val.run("optimus-oracle", i).avg_jct_slots() for i in range(args.val_traces)])
    print(f"reward {args.reward}, RL learning rate {args.rl_lr:g}, entropy weight {args.entropy_weight:g}")
    print(f"validation ({args.val_traces} traces, seed 9973, {val.cluster.nodes} nodes): DRF {drf:.3f} slots, "
          f"Optimus-oracle {oracle:.3f} slots", flush=True)
    cpu_baselines = time.process_time() - t_start

    tr = Trainer(val.speeds, val.cluster, TrainConfig(rl_lr=args.rl_lr, explore=args.explore, reward=args.reward,
                                                    normalize_advantage=(args.reward.startswith("marginal")
                                                                         and not args.raw_advantage),
                                                    entropy_weight=args.entropy_weight))
    t_train = time.process_time()
    curve = []
    if args.resume:
        tr.load_checkpoint(args.resume)
        sl = tr.evaluate(val.traces)
    else:
        demos = tr.demonstrations(train.traces[: args.sl_traces])
        losses = tr.train_sl(demos, args.sl_steps, log_every=250)
        print(f"SL: {len(demos[3]):,} DRF decisions from {args.sl_traces} traces, {args.sl_steps} steps, "
              f"loss {np.mean(losses[:50]):.3f} -> {np.mean(losses[-50:]):.3f}", flush=True)
        sl = tr.evaluate(val.traces)
    print(f"SL-only policy: {sl:.3f} slots = {sl / drf:.3f} x DRF", flush=True)
    curve.append((0, sl))

    def choice_score(v):
        return tr.evaluate(select.traces) if select else v

    best = (choice_score(sl), sl, tr.policy.numpy_params(), 0)
    deadline = time.perf_counter() + 60 * args.minutes
    ep = 0
    while time.perf_counter() < deadline:
        trace = train.traces[(args.sl_traces + ep) % len(train.traces)]
        jct = tr.rl_episode(trace)
        ep += 1
        if ep % 10 == 0:
            print(f"  RL episode {ep}: training trace avg JCT {jct:.2f} slots, {tr.rl_steps} updates", flush=True)
        if ep % args.eval_every == 0:
            v = tr.evaluate(val.traces)
            score = choice_score(v)
            curve.append((ep, v))
            print(f"RL episode {ep}: validation {v:.3f} slots = {v / drf:.3f} x DRF, {v / oracle:.3f} x "
                  f"Optimus-oracle" + (f"; selection traces {score:.3f}" if select else ""), flush=True)
            if score < best[0]:
                best = (score, v, tr.policy.numpy_params(), ep)
            tr.save_checkpoint(Path(args.out).with_suffix(".pt"))
    train_cpu = time.process_time() - t_train
    final = tr.evaluate(val.traces)
    curve.append((ep, final))
    score = choice_score(final)
    if score < best[0]:
        best = (score, final, tr.policy.numpy_params(), ep)
    from lucidd.elastic.dl2 import save_policy

    save_policy(args.out, best[2], tr.st, {"validation_avg_jct_slots": best[1], "chosen_at_episode": best[3],
                                           "episodes": ep,
                                           "sl_steps": tr.sl_steps, "rl_updates": tr.rl_steps})
    tr.save_checkpoint(Path(args.out).with_suffix(".pt"))
    v = best[1]
    how = (f"chosen at episode {best[3]} on {args.select_traces} seed-2 traces" if select
           else f"best validation, episode {best[3]}")
    print("\nlearning curve (RL episodes, validation avg JCT slots):",
          ", ".join(f"{e}: {j:.2f}" for e, j in curve))
    print(f"training CPU time {train_cpu / 60:.1f} min (wall {(time.perf_counter() - w0) / 60:.1f} min incl. "
          f"baselines {cpu_baselines:.0f} s CPU), {ep} RL episodes, {tr.rl_steps} updates; policy -> {args.out}")
    print(f"DL2 ({how}) {v:.3f} slots = {v / drf:.3f} x DRF (target <= 0.65: "
          f"{'met' if v <= 0.65 * drf else 'NOT met'}), {v / oracle:.3f} x Optimus-oracle (target <= 1.0: "
          f"{'met' if v <= oracle else 'NOT met'})")
    print(f"SL-only {sl / drf:.3f} x DRF (target within 10 %: {'met' if abs(sl / drf - 1) <= 0.10 else 'NOT met'})")


if __name__ == "__main__":
    main()
