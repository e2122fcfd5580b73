"""Betty's side of the HPO comparison (bench/peers/compare.py).

The problem of mlo's configs/hpo_logreg.yaml, written against Betty 0.2.1: a logistic regression
(torch.nn.Linear(20, 1)) trained by SGD (lr 0.1) on 500 points with the penalty
1/2 sum_j lambda_j w_j^2, restarted from zero at every unroll of 100 steps; the 20 weights lambda
(initial 1) trained by SGD (lr 1, momentum 0.9) on 500 validation points, clamped at 1e-8. The
scenario of Betty's own regression test, with the same data shapes and hypergradient settings
(darts: alpha 0.01; cg: 3 iterations, alpha 0.1). Times `--steps` global steps after `--warmup`
and prints one line: "ms_per_step=<x> steps=<n>".

    python bench/peers/betty_hpo.py --method darts|cg [--warmup W] [--steps N] [--device cpu]
"""

import argparse
import sys

import torch
import torch.nn.functional as F

from betty.configs import Config, EngineConfig
from betty.engine import Engine
from betty.problems import ImplicitProblem
from betty_timing import time_steps

FEATURES = 20
SAMPLES = 1000


class Penalties(torch.nn.Module):
    """The per-feature L2 weights lambda."""

    def __init__(self):
        super().__init__()
        self.weights = torch.nn.Parameter(torch.ones(FEATURES))

    def forward(self):
        return self.weights


class Outer(ImplicitProblem):
    def training_step(self, batch):
        x, y = batch
        return F.binary_cross_entropy_with_logits(self.inner.module(x).squeeze(-1), y)

    def param_callback(self):
        with torch.no_grad():
            for p in self.trainable_parameters():
                p.clamp_(min=1e-8)


class Inner(ImplicitProblem):
    def training_step(self, batch):
        x, y = batch
        bce = F.binary_cross_entropy_with_logits(self.module(x).squeeze(-1), y)
        w = self.module.weight.squeeze(0)
        return bce + 0.5 * (self.outer() * w.pow(2)).sum()

    def on_inner_loop_start(self):
        with torch.no_grad():
            for p in self.module.parameters():
                p.zero_()


def method_config(method):
    if method == "darts":
        return Config(type="darts", unroll_steps=100, darts_alpha=0.01)
    if method == "cg":
        return Config(type="cg", unroll_steps=100, cg_iterations=3, cg_alpha=0.1)
    raise SystemExit(f"betty_hpo.py: --method must be darts or cg, got '{method}'")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", required=True)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.warmup < 0 or args.steps < 1:
        raise SystemExit("betty_hpo.py: --warmup must be >= 0 and --steps >= 1")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    w_true = torch.randn(FEATURES)
    x = torch.randn(SAMPLES, FEATURES)
    y = ((x @ w_true + 0.1 * torch.randn(SAMPLES)) > 0).float()
    half = SAMPLES // 2
    train = [(x[:half].to(device), y[:half].to(device))]
    valid = [(x[half:].to(device), y[half:].to(device))]

    penalties = Penalties().to(device)
    outer = Outer(
        name="outer",
        module=penalties,
        optimizer=torch.optim.SGD(penalties.parameters(), lr=1.0, momentum=0.9),
        train_data_loader=valid,
        config=Config(),
    )
    model = torch.nn.Linear(FEATURES, 1).to(device)
    inner = Inner(
        name="inner",
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        train_data_loader=train,
        config=method_config(args.method),
    )
    engine = Engine(
        config=EngineConfig(train_iters=args.warmup + args.steps, valid_step=10**9),
        problems=[outer, inner],
        dependencies={"u2l": {outer: [inner]}, "l2u": {inner: [outer]}},
    )
    time_steps(engine, args.warmup, args.steps, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
