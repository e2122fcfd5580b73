#!/usr/bin/env python3
"""The tables of docs/reweighting.md from the runs of scripts/reweight_table.sh.

    scripts/reweight_summary.py ROOT [--reference METHOD] [--no-rare3]

ROOT holds one folder per run length, `<steps>/`, each with one folder per method and one
`seed_<s>/results.json` per seed (as `mlo run --seeds` writes them), and `times.tsv` (length,
method, seconds). Prints, per length and method: validation balanced accuracy (mean over the
seeds: what choices are made on), test balanced and rarest-3 accuracy (mean +- std over the
seeds), their paired differences against the reference method (plain cross-entropy, `baseline`,
unless --reference names another; same seeds; mean, standard error, the worst seed and how many
seeds are ahead), and the wall time. Only seeds present for both a method and the reference
enter its paired differences. --no-rare3 leaves out the rarest-3 columns (balanced classes,
where which classes are rarest means nothing).
"""
import argparse
import json
import math
import os

ORDER = ["baseline", "class_balanced", "logit_adjusted", "mwn", "class_mwn", "l2rw",
         "class_mwn_la", "learned_loss", "learned_loss_cw"]


def seeds_of(folder):
    out = {}
    if not os.path.isdir(folder):
        return out
    for name in os.listdir(folder):
        path = os.path.join(folder, name, "results.json")
        if name.startswith("seed_") and os.path.exists(path):
            with open(path) as f:
                out[int(name[5:])] = json.load(f)
    return out


def mean_std(xs):
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def main(root, reference, rare3):
    times = {}
    if os.path.exists(os.path.join(root, "times.tsv")):
        with open(os.path.join(root, "times.tsv")) as f:
            for line in f:
                steps, method, seconds = line.split()
                times[(steps, method)] = times.get((steps, method), 0) + float(seconds)
    lengths = sorted((d for d in os.listdir(root) if d.isdigit()), key=int)
    ref = "CE" if reference == "baseline" else reference
    head = ["steps", "method", "seeds", "valid balanced", "test balanced"]
    head += ["rarest-3"] if rare3 else []
    head += ["balanced - %s (se)" % ref, "worst seed", "seeds ahead"]
    head += ["rarest-3 - %s (se)" % ref] if rare3 else []
    head += ["wall"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    total = 0.0
    for steps in lengths:
        base = seeds_of(os.path.join(root, steps, reference))
        present = [m for m in ORDER if os.path.isdir(os.path.join(root, steps, m))]
        for method in present:
            runs = seeds_of(os.path.join(root, steps, method))
            if not runs:
                continue
            test = {s: r["test"] for s, r in runs.items()}
            valid = [r["valid"]["valid/balanced_acc"] * 100 for r in runs.values()]
            bal = [t["balanced_acc"] * 100 for t in test.values()]
            rare = [t["rare3_acc"] * 100 for t in test.values()]
            row = [steps, method, str(len(runs)), "%.2f" % mean_std(valid)[0],
                   "%.2f +- %.2f" % mean_std(bal)]
            row += ["%.2f +- %.2f" % mean_std(rare)] if rare3 else []
            paired = sorted(s for s in runs if s in base)
            if method != reference and paired:
                db = [(test[s]["balanced_acc"] - base[s]["test"]["balanced_acc"]) * 100
                      for s in paired]
                dr = [(test[s]["rare3_acc"] - base[s]["test"]["rare3_acc"]) * 100 for s in paired]
                mb, sb = mean_std(db)
                mr, sr = mean_std(dr)
                n = math.sqrt(len(paired))
                worst = min(range(len(paired)), key=lambda i: db[i])
                row += ["%+.2f (%.2f)" % (mb, sb / n),
                        "%+.2f (seed %d)" % (db[worst], paired[worst]),
                        "%d of %d" % (sum(1 for d in db if d > 0), len(db))]
                row += ["%+.2f (%.2f)" % (mr, sr / n)] if rare3 else []
            else:
                row += ["", "", ""] + ([""] if rare3 else [])
            seconds = times.get((steps, method))
            if seconds:
                total += seconds
            row.append("%.0f s" % seconds if seconds else "")
            print("| " + " | ".join(row) + " |")
    if total:
        print("\nsum of the methods' times above: %.0f s (%.1f h; runs that ran at once "
              "overlap, so the wall time is less)" % (total, total / 3600))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s ROOT [--reference METHOD] [--no-rare3]")
    parser.add_argument("root")
    parser.add_argument("--reference", default="baseline", choices=ORDER,
                        help="the method the paired differences are taken against")
    parser.add_argument("--no-rare3", action="store_true",
                        help="leave out the rarest-3 columns (balanced classes)")
    args = parser.parse_args()
    if not os.path.isdir(args.root):
        parser.error("no folder '%s'" % args.root)
    main(args.root, args.reference, not args.no_rare3)
