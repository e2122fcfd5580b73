#!/usr/bin/env python3
"""TensorBoard's own reader on the event files of `mlo run` (a tiny synthetic run).

Reads <out>/tb/ with the `tensorboard` package's EventAccumulator (the loader TensorBoard's
server uses; it checks every record's CRC-32C) and checks every tag, step and value against
metrics.jsonl, the texts (resolved config, run metadata), and that a run stopped and resumed,
or killed and resumed from an older state, holds each (tag, step) once, with the uninterrupted
run's values.

  tensorboard_reader_test.py --mlo build/mlo
Exits 77 (skipped) when the tensorboard package is missing (scripts/setup.sh --check-tools
installs it into .venv/).
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util
except ImportError as error:
    print(f"SKIPPED: the tensorboard package is not importable by {sys.executable} ({error}); "
          "install it with scripts/setup.sh --check-tools", file=sys.stderr)
    sys.exit(77)

CONFIG = """experiment: reweighting
name: tiny
seed: 3
threads: 1
engine: {train_iters: 12, valid_step: 4, log_step: 1, save_step: 4}
data: {dataset: synthetic, synthetic_size: 30, synthetic_test_size: 5, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 16, meta_batch_size: 10, test_batch_size: 50}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
    scheduler: {name: multistep, milestones: [8], gamma: 0.5}
    unroll_steps: 2
  reweighter:
    model: {name: mwn, hidden: 10}
    optimizer: {name: adam, lr: 0.01}
"""

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAILED:", message, file=sys.stderr)


def tag_of(source, name):  # io::tensorboard_tag
    if source == "validation" and name.startswith("valid/"):
        return name
    return f"{source}/{name}"


def expected_scalars(out):
    """{tag: {step: value}} from metrics.jsonl, each (tag, step) once."""
    expected = {}
    with open(os.path.join(out, "metrics.jsonl")) as lines:
        for line in lines:
            record = json.loads(line)
            step, source = record.pop("step"), record.pop("source")
            for name, value in record.items():
                value = float(value) if not isinstance(value, str) else float(value.replace(
                    "Infinity", "inf"))
                steps = expected.setdefault(tag_of(source, name), {})
                assert step not in steps, f"metrics.jsonl repeats {source} {name} at {step}"
                steps[step] = value
    return expected


def float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def load(out):
    accumulator = event_accumulator.EventAccumulator(
        os.path.join(out, "tb"), size_guidance={event_accumulator.SCALARS: 0,
                                                event_accumulator.TENSORS: 0})
    accumulator.Reload()
    return accumulator


def texts(accumulator, tag):
    return [(event.step, tensor_util.make_ndarray(event.tensor_proto).reshape(-1)[0].decode())
            for event in accumulator.Tensors(tag)]


def compare(accumulator, expected, what):
    tags = set(accumulator.Tags()["scalars"])
    check(tags == set(expected), f"{what}: the scalar tags differ from metrics.jsonl's: "
          f"missing {sorted(set(expected) - tags)}, extra {sorted(tags - set(expected))}")
    compared = 0
    for tag in sorted(tags & set(expected)):
        events = accumulator.Scalars(tag)
        steps = [event.step for event in events]
        check(steps == sorted(expected[tag]),
              f"{what}: {tag}: steps {steps} != metrics.jsonl's {sorted(expected[tag])}")
        for event in events:
            want = float32(expected[tag].get(event.step, math.nan))
            same = (math.isnan(want) and math.isnan(event.value)) or event.value == want
            check(same, f"{what}: {tag} at step {event.step}: {event.value} != {want}")
            compared += 1
    return len(tags), compared


def run(mlo, config, out, *extra, killed=False):
    command = [mlo, "run", config, "--out", out, "--no-progress", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != (-9 if killed else 0):
        print(done.stdout, done.stderr, file=sys.stderr)
        sys.exit(f"{' '.join(command)} failed with exit code {done.returncode}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mlo", required=True)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="mlo_tensorboard_reader_")
    try:
        config = os.path.join(work, "tiny.yaml")
        with open(config, "w") as f:
            f.write(CONFIG)

        # An uninterrupted run: every record of metrics.jsonl is in the event file.
        full = os.path.join(work, "full")
        run(args.mlo, config, full)
        accumulator = load(full)
        expected = expected_scalars(full)
        tags, values = compare(accumulator, expected, "uninterrupted run")
        for tag in ("classifier/loss", "reweighter/loss", "valid/balanced_acc",
                    "test/balanced_acc", "classifier/lr"):
            check(tag in expected, f"metrics.jsonl has no {tag}")
        print(f"uninterrupted run: {tags} scalar tags, {values} values read back, "
              f"equal to metrics.jsonl")
        config_texts = texts(accumulator, "run/config")
        check([step for step, _ in config_texts] == [0], f"run/config steps: {config_texts}")
        check("experiment: reweighting" in config_texts[0][1], "run/config lacks the config")
        metadata = texts(accumulator, "run/metadata")
        check(len(metadata) == 2 and "| seed | 3 |" in metadata[0][1]
              and "| world size | 1 |" in metadata[0][1], f"run/metadata: {metadata}")
        with open(os.path.join(full, "results.json")) as f:
            meta = json.load(f)["meta"]
        check(meta["git_commit"] in metadata[0][1], "run/metadata lacks the commit")
        check([step for step, _ in metadata] == [0, 12], f"run/metadata steps: {metadata}")
        check(f"| finished | {meta['finished']} |" in metadata[1][1],
              "the last run/metadata lacks results.json's end time")
        print(f"texts: run/config at steps {[s for s, _ in config_texts]}, run/metadata at "
              f"steps {[s for s, _ in metadata]}")

        # Stopped after step 6, resumed to 12: each (tag, step) once, with the values of the
        # uninterrupted run (CPU runs resume bitwise); the texts of both starts are there.
        part = os.path.join(work, "part")
        run(args.mlo, config, part, "--stop-at", "6")
        run(args.mlo, config, part, "--resume")
        resumed = load(part)
        tags, values = compare(resumed, expected, "stopped and resumed run")
        print(f"stopped at 6 and resumed: {tags} scalar tags, {values} values, each step once, "
              f"equal to the uninterrupted run's")
        steps = [step for step, _ in texts(resumed, "run/metadata")]
        check(steps == [0, 6, 12], f"resumed run/metadata steps: {steps}")
        finished = texts(resumed, "run/metadata")[-1][1]
        check("| finished | " in finished and "| from step | 6 |" in finished,
              f"the last run/metadata lacks the end time or the start step: {finished}")

        # Killed at the end of step 7, before the run recorded it (a crash: the last state is
        # step 4's), resumed: the events of steps 5 and 6 written before the crash are dropped,
        # then written again once.
        crashed = os.path.join(work, "crashed")
        run(args.mlo, config, crashed, "--raise-at", "7:KILL", killed=True)
        before = load(crashed)
        check(max(event.step for event in before.Scalars("classifier/loss")) == 6,
              "the killed run did not log steps up to 6, or logged step 7")
        run(args.mlo, config, crashed, "--resume")
        after = load(crashed)
        tags, values = compare(after, expected, "killed and resumed run")
        steps = [step for step, _ in texts(after, "run/metadata")]
        check(steps == [0, 4, 12], f"killed and resumed run/metadata steps: {steps}")
        print(f"killed at step 7 (state of step 4) and resumed: {tags} scalar tags, {values} "
              f"values, each step once, equal to the uninterrupted run's")

    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("tensorboard's reader agrees with metrics.jsonl")


if __name__ == "__main__":
    main()
