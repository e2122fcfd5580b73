#!/usr/bin/env python3
"""The long-tail table of docs/reweighting.md from the runs of scripts/reweight_table.sh.

    scripts/reweight_summary.py ROOT

ROOT holds one folder per run length, `<steps>/`, each with one folder per method and one
`seed_<s>/results.json` per seed (as `mlo run --seeds` writes them), and `times.tsv` (length,
method, seconds). Prints, per length and method: test balanced and rarest-3 accuracy (mean +- std
over the seeds), their paired differences against plain cross-entropy (`baseline`, same seeds;
mean +- standard error, and the worst seed), and the wall time. Only seeds present for both a
method and the baseline enter its paired differences.
"""
import json
import math
import os
import sys

ORDER = ["baseline", "class_balanced", "logit_adjusted", "mwn", "class_mwn", "l2rw"]


def seeds_of(folder):
    out = {}
    if not os.path.isdir(folder):
        return out
    for name in os.listdir(folder):
        path = os.path.join(folder, name, "results.json")
        if name.startswith("seed_") and os.path.exists(path):
            with open(path) as f:
                out[int(name[5:])] = json.load(f)["test"]
    return out


def mean_std(xs):
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def main(root):
    times = {}
    if os.path.exists(os.path.join(root, "times.tsv")):
        with open(os.path.join(root, "times.tsv")) as f:
            for line in f:
                steps, method, seconds = line.split()
                times[(steps, method)] = times.get((steps, method), 0) + float(seconds)
    lengths = sorted((d for d in os.listdir(root) if d.isdigit()), key=int)
    print("| steps | method | seeds | balanced | rarest-3 | balanced - CE (se) | worst seed "
          "| rarest-3 - CE (se) | wall |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    total = 0.0
    for steps in lengths:
        base = seeds_of(os.path.join(root, steps, "baseline"))
        present = [m for m in ORDER if os.path.isdir(os.path.join(root, steps, m))]
        for method in present:
            runs = seeds_of(os.path.join(root, steps, method))
            if not runs:
                continue
            bal = [r["balanced_acc"] * 100 for r in runs.values()]
            rare = [r["rare3_acc"] * 100 for r in runs.values()]
            row = [steps, method, str(len(runs)), "%.2f +- %.2f" % mean_std(bal),
                   "%.2f +- %.2f" % mean_std(rare)]
            paired = sorted(s for s in runs if s in base)
            if method != "baseline" and paired:
                db = [(runs[s]["balanced_acc"] - base[s]["balanced_acc"]) * 100 for s in paired]
                dr = [(runs[s]["rare3_acc"] - base[s]["rare3_acc"]) * 100 for s in paired]
                mb, sb = mean_std(db)
                mr, sr = mean_std(dr)
                n = math.sqrt(len(paired))
                worst = min(range(len(paired)), key=lambda i: db[i])
                row += ["%+.2f (%.2f)" % (mb, sb / n),
                        "%+.2f (seed %d)" % (db[worst], paired[worst]),
                        "%+.2f (%.2f)" % (mr, sr / n)]
            else:
                row += ["", "", ""]
            seconds = times.get((steps, method))
            if seconds:
                total += seconds
            row.append("%.0f s" % seconds if seconds else "")
            print("| " + " | ".join(row) + " |")
    if total:
        print("\nsum of the methods' times above: %.0f s (%.1f h; runs that ran at once "
              "overlap, so the wall time is less)" % (total, total / 3600))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
