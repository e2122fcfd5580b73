"""mlo against Betty on the same work, on the same machine and threads, in one run.

Scenarios (each side builds its own problem, with the same model, data shapes, optimizers and
hypergradient settings; mlo's side is build/bench/peers_steps on a config of configs/):
  hpo_darts, hpo_cg   the logistic-regression HPO problem of Betty's regression test and mlo's
                      configs/hpo_logreg.yaml (20 L2 weights, unroll 100), one thread, against
                      bench/peers/betty_hpo.py;
  meta_iteration_resnet50
                      the data-reweighting meta-iteration of the memory ablation
                      (configs/ablation/lt_cifar10_resnet50.yaml: CIFAR ResNet-50, MWN, DARTS,
                      unroll 1) on synthetic CIFAR-shaped batches of 32, two threads, against
                      bench/peers/betty_reweight.py --model resnet50;
  reweight_step       a global step of the main job (configs/reweight_lt_fmnist.yaml: the
                      Fashion-MNIST CNN, batches of 100, DARTS, unroll 1) with the
                      Meta-Weight-Net (reweighting.method mwn), one thread, against
                      bench/peers/betty_reweight.py --model cnn.
                      In both, mlo's mwn is set to Betty's math: the plain mean of the weighted
                      losses, no weight floor, the weights recomputed from the losses at each
                      perturbed classifier (normalize_weights, weight_floor,
                      freeze_weight_inputs). Left different: mlo restores the classifier's
                      batch-norm statistics after a re-evaluation, and runs the ResNet-50
                      channels-last on the CPU (its `auto` memory format).

Every round runs each side once, in a fresh process, the order alternating from round to round
so that other load on the machine falls on both alike; each side times its own steps after a
warm-up (setup excluded). Printed per scenario: each round's milliseconds per global step, the
median time ratio mlo / Betty with its range over the rounds, and each side's peak resident
memory (the largest over the rounds of the process's maximum RSS, libraries included).

Betty 0.2.1 declares Python < 3.11; it is installed, when missing, into the interpreter running
this script with `pip install --ignore-requires-python --no-deps betty-ml==0.2.1` (its imports
are torch and numpy).

    .venv/bin/python bench/peers/compare.py [--rounds R] [--only SCENARIO]
                                            [--mlo-build build] [--device cpu|cuda]

--steps sets the timed steps of the HPO scenarios (500); the reweighting ones time
--reweight-steps (3) after 2 warm-up steps; --mlo-set KEY=VALUE (repeatable) goes to mlo's side
of the reweighting scenarios.
"""

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BETTY = "betty-ml==0.2.1"


def ensure_betty():
    try:
        import betty  # noqa: F401

        return
    except ImportError:
        pass
    print(f"compare.py: installing {BETTY} into {sys.prefix}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--ignore-requires-python",
         "--no-deps", BETTY],
        check=True,
    )


def run_side(command, env, threads):
    """Runs one side; returns (ms per step, peak RSS in MiB)."""
    env = dict(env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.stdout.read(), proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"compare.py: {' '.join(command)} failed ({proc.returncode}):\n{err}")
    for line in out.splitlines():
        if line.startswith("ms_per_step="):
            return float(line.split()[0].split("=")[1]), usage.ru_maxrss / 1024.0
    raise SystemExit(f"compare.py: no ms_per_step line from {' '.join(command)}:\n{out}{err}")


def scenarios(args):
    """name -> (mlo command, Betty command, threads)."""
    steps_binary = os.path.join(args.mlo_build, "bench", "peers_steps")
    device = [] if args.device == "cpu" else ["--set", f"device={args.device}"]
    common = ["--warmup", "100", "--steps", str(args.steps)]
    out = {}
    for method in ("darts", "cg"):
        mlo = [steps_binary, "configs/hpo_logreg.yaml", *common,
               "--set", f"problems.inner.method={method}", "--set", "threads=1", *device]
        betty = [sys.executable, os.path.join(HERE, "betty_hpo.py"), "--method", method,
                 *common, "--device", args.device]
        out[f"hpo_{method}"] = (mlo, betty, 1)
    reweight = ["--warmup", "2", "--steps", str(args.reweight_steps)]
    # Betty's weighted loss: mean(w l) with w = net(l.detach()), the losses recomputed at every
    # perturbed classifier: mlo's mwn without its normalization, floor and frozen inputs.
    mwn_as_betty = ["--set", "reweighting.mwn.normalize_weights=false",
                    "--set", "reweighting.mwn.weight_floor=0",
                    "--set", "reweighting.mwn.freeze_weight_inputs=false"]
    mlo_set = [arg for kv in args.mlo_set for arg in ("--set", kv)]
    betty_reweight = [sys.executable, os.path.join(HERE, "betty_reweight.py"), *reweight,
                      "--device", args.device]
    out["meta_iteration_resnet50"] = (
        [steps_binary, "configs/ablation/lt_cifar10_resnet50.yaml", *reweight,
         "--set", "data.dataset=synthetic", "--set", "data.augment=false",
         "--set", "data.batch_size=32", "--set", "engine.track_memory=false",
         "--set", "threads=2", *mwn_as_betty, *mlo_set, *device],
        [*betty_reweight, "--model", "resnet50", "--batch", "32", "--threads", "2"], 2)
    out["reweight_step"] = (
        [steps_binary, "configs/reweight_lt_fmnist.yaml", *reweight,
         "--set", "reweighting.method=mwn", "--set", "threads=1", *mwn_as_betty, *mlo_set,
         *device],
        [*betty_reweight, "--model", "cnn", "--batch", "100", "--threads", "1"], 1)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--reweight-steps", type=int, default=3)
    parser.add_argument("--mlo-set", action="append", default=[],
                        help="KEY=VALUE for mlo's side of the reweighting scenarios (e.g. the "
                        "main job's data.root)")
    parser.add_argument("--only", default="")
    parser.add_argument("--mlo-build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.reweight_steps < 1:
        raise SystemExit("compare.py: --rounds, --steps and --reweight-steps must be >= 1")
    ensure_betty()
    env = dict(os.environ)
    all_scenarios = scenarios(args)
    if args.only and args.only not in all_scenarios:
        raise SystemExit(f"compare.py: --only must be one of {', '.join(all_scenarios)}")
    for name, (mlo, betty, threads) in all_scenarios.items():
        if args.only and name != args.only:
            continue
        mlo_ms, betty_ms, ratios = [], [], []
        mlo_peak = betty_peak = 0.0
        for r in range(args.rounds):
            if r % 2 == 0:
                a, a_peak = run_side(mlo, env, threads)
                b, b_peak = run_side(betty, env, threads)
            else:
                b, b_peak = run_side(betty, env, threads)
                a, a_peak = run_side(mlo, env, threads)
            mlo_ms.append(a)
            betty_ms.append(b)
            ratios.append(a / b)
            mlo_peak, betty_peak = max(mlo_peak, a_peak), max(betty_peak, b_peak)
            print(f"{name} round {r}: mlo {a:.3f} ms/step, betty {b:.3f} ms/step, "
                  f"ratio {a / b:.3f}", flush=True)
        print(f"{name}: mlo {statistics.median(mlo_ms):.3f} ms/step, betty "
              f"{statistics.median(betty_ms):.3f} ms/step, time ratio mlo/betty "
              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
              f"peak RSS mlo {mlo_peak:.0f} MiB, betty {betty_peak:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
