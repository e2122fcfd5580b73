"""Betty's side of the reweighting comparisons (bench/peers/compare.py).

A classifier trained on a loss weighted per sample by a Meta-Weight-Net (1 -> 100 -> 1, ReLU,
sigmoid, fed the detached per-sample losses), the net trained on the mean cross-entropy of the
classifier on a meta batch, with DARTS (alpha 0.01) through an unroll of one step: the
meta-iteration of Meta-Weight-Net and of Betty's data-reweighting tutorial, written against
Betty 0.2.1 with the models of mlo's configs:

  --model resnet50  the CIFAR ResNet-50 of mlo's memory ablation (3x3 stem to 64 channels, no
                    max-pool, bottlenecks 3-4-6-3 with projection shortcuts and the stride on the
                    3x3 convolution, average pool, linear), on [B, 3, 32, 32]; the classifier's
                    SGD at lr 0.01 (configs/ablation/lt_cifar10_resnet50.yaml);
  --model cnn       the main job's Fashion-MNIST CNN (two 3x3 convolutions of 32 and 64
                    channels, each max-pooled then ReLU, linear 3136 -> 128, ReLU, linear), on
                    [B, 1, 28, 28]; lr 0.05 (configs/reweight_lt_fmnist.yaml).

Classifier: SGD, momentum 0.9, weight decay 5e-4. Weight net: Adam, lr 1e-3, weight decay 1e-4.
Data: random tensors of those shapes and random labels of 10 classes (the cost of a step does
not depend on the values). Times `--steps` global steps after `--warmup` and prints one line:
"ms_per_step=<x> steps=<n>".

    python bench/peers/betty_reweight.py --model resnet50|cnn [--batch B] [--warmup W]
                                         [--steps N] [--device cpu] [--threads T]
"""

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from betty.configs import Config, EngineConfig
from betty.engine import Engine
from betty.problems import ImplicitProblem
from betty_timing import time_steps


class Bottleneck(nn.Module):
    def __init__(self, in_channels, width, stride):
        super().__init__()
        out = 4 * width
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = None
        if stride != 1 or in_channels != out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class CifarResNet50(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU())
        blocks, in_channels = [], 64
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                blocks.append(Bottleneck(in_channels, width, stride if i == 0 else 1))
                in_channels = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(in_channels, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class FashionCnn(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 7 * 7, 128)
        self.head = nn.Linear(128, classes)

    def forward(self, x):
        y = F.relu(F.max_pool2d(self.conv1(x), 2))
        y = F.relu(F.max_pool2d(self.conv2(y), 2))
        return self.head(F.relu(self.fc(torch.flatten(y, 1))))


class WeightNet(nn.Module):
    def __init__(self, hidden=100):
        super().__init__()
        self.first = nn.Linear(1, hidden)
        self.second = nn.Linear(hidden, 1)

    def forward(self, losses):
        return torch.sigmoid(self.second(F.relu(self.first(losses))))


class Reweighter(ImplicitProblem):
    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self.classifier(x), y)


class Classifier(ImplicitProblem):
    def training_step(self, batch):
        x, y = batch
        losses = F.cross_entropy(self.module(x), y, reduction="none")
        weights = self.reweighter(losses.detach().unsqueeze(1)).squeeze(1)
        return (weights * losses).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.model not in ("resnet50", "cnn"):
        raise SystemExit(f"betty_reweight.py: --model must be resnet50 or cnn, got '{args.model}'")
    if args.batch < 1 or args.warmup < 0 or args.steps < 1 or args.threads < 1:
        raise SystemExit("betty_reweight.py: --batch, --steps, --threads must be >= 1 and "
                         "--warmup >= 0")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    shape, lr = ((3, 32, 32), 0.01) if args.model == "resnet50" else ((1, 28, 28), 0.05)

    def batches(count):
        return [(torch.randn(args.batch, *shape, device=device),
                 torch.randint(10, (args.batch,), device=device)) for _ in range(count)]

    model = (CifarResNet50() if args.model == "resnet50" else FashionCnn()).to(device)
    net = WeightNet().to(device)
    reweighter = Reweighter(
        name="reweighter",
        module=net,
        optimizer=torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4),
        train_data_loader=batches(4),
        config=Config(),
    )
    classifier = Classifier(
        name="classifier",
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4),
        train_data_loader=batches(4),
        config=Config(type="darts", unroll_steps=1, darts_alpha=0.01),
    )
    engine = Engine(
        config=EngineConfig(train_iters=args.warmup + args.steps, valid_step=10**9),
        problems=[reweighter, classifier],
        dependencies={"u2l": {reweighter: [classifier]}, "l2u": {classifier: [reweighter]}},
    )
    time_steps(engine, args.warmup, args.steps, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
