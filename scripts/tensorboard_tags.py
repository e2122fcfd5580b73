#!/usr/bin/env python3
"""What TensorBoard sees in a run: every tag of <run>/tb with its number of events and steps.

Reads the event files with the tensorboard package's own EventAccumulator (the loader behind
`tensorboard --logdir`), so its output is what TensorBoard would show.

  .venv/bin/python scripts/tensorboard_tags.py runs/reweight_lt_fmnist
(the tensorboard package: `scripts/setup.sh --check-tools` installs it into .venv/)
"""
import os
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as error:
    sys.exit(f"the tensorboard package is not importable ({error}); "
             "pip install tensorboard, or scripts/setup.sh --check-tools")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = os.path.join(sys.argv[1], "tb")
    if not os.path.isdir(folder):
        sys.exit(f"{folder}: no such folder (is logging.tensorboard off?)")
    accumulator = event_accumulator.EventAccumulator(
        folder, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = sorted(tags["scalars"])
    total = 0
    for tag in scalars:
        events = accumulator.Scalars(tag)
        total += len(events)
        print(f"scalar {tag}: {len(events)} events, steps {events[0].step}..{events[-1].step}")
    for tag in sorted(tags["tensors"]):
        steps = [event.step for event in accumulator.Tensors(tag)]
        print(f"text   {tag}: at steps {steps}")
    print(f"{len(scalars)} scalar tags, {total} scalar events, {len(tags['tensors'])} text tags")


if __name__ == "__main__":
    main()
