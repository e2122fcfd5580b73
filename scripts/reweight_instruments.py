#!/usr/bin/env python3
"""The reweighting instruments of docs/reweighting.md as curves, one PNG through gnuplot.

    scripts/reweight_instruments.py OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Each RUN_DIR is an `mlo run` output folder (its metrics.jsonl). Six panels, every run overlaid:
validation balanced accuracy, validation rarest-3 accuracy, the largest relative weight
(weight_peak = max_i w_i / mean_i w_i, the largest per-sample step under normalized weights), the
effective sample size (weight_ess), the weight net's saturation (weight_saturated) and the
meta-gradient norm, with the classifier's learning-rate drops as dashed vertical lines. Series a run did
not log (weight_peak and weight_ess are derived from weight_max, weight_mean and weight_std when
absent) are left out of its panel.
"""
import json
import os
import subprocess
import sys
import tempfile

# (source, metric, title, where the legend goes)
PANELS = [
    ("validation", "valid/balanced_acc", "valid balanced acc", "outside below maxrows 2"),
    ("validation", "valid/rare3_acc", "valid rarest-3 acc", "outside below maxrows 2"),
    ("classifier", "weight_peak", "max w / mean w", "outside below maxrows 2"),
    ("classifier", "weight_ess", "effective sample size / N", "outside below maxrows 2"),
    ("classifier", "weight_saturated", "weight net outputs < 0.01 or > 0.99",
     "outside below maxrows 2"),
    ("reweighter", "meta_grad_norm", "meta-gradient norm", "outside below maxrows 2"),
]


def series(run_dir):
    """{(source, metric): [(step, value)]} and the steps where the classifier's LR drops."""
    out, drops, last_lr = {}, [], None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            source, step = row.get("source"), row.get("step")
            if source == "classifier":
                lr = row.get("lr")
                if last_lr is not None and lr is not None and lr < last_lr * 0.99:
                    drops.append(step)
                last_lr = lr if lr is not None else last_lr
                if "weight_peak" not in row and row.get("weight_mean"):
                    row["weight_peak"] = row["weight_max"] / row["weight_mean"]
                if "weight_ess" not in row and row.get("weight_mean"):
                    cv2 = (row["weight_std"] / row["weight_mean"]) ** 2
                    row["weight_ess"] = 1.0 / (1.0 + cv2)  # (sum w)^2 / (N sum w^2), N large
            for key, value in row.items():
                if isinstance(value, (int, float)) and key not in ("step",):
                    out.setdefault((source, key), []).append((step, value))
    return out, drops


def main(argv):
    if len(argv) < 3 or any("=" not in a for a in argv[2:]):
        sys.exit(__doc__)
    png = argv[1]
    # (a label's quote would end gnuplot's string)
    runs = [[label.replace("'", "`"), path] for label, path in (a.split("=", 1) for a in argv[2:])]
    data = {label: series(path) for label, path in runs}
    tmp = tempfile.mkdtemp(prefix="mlo-instruments-")
    script = [
        "set terminal pngcairo size 1500,1000 noenhanced font ',10'",
        f"set output '{png}'",
        "set multiplot layout 2,3 title \"x: global step; dashed: the classifier's learning-rate "
        "drops\" font ',11'",
        "set grid",
    ]
    drops = sorted({d for _, (_, ds) in data.items() for d in ds})
    for i, (source, metric, title, key) in enumerate(PANELS):
        script.append(f"set title '{title}'")
        script.append(f"set key {key} font ',9'")
        script.append("unset arrow")
        for d in drops:
            script.append(f"set arrow from {d}, graph 0 to {d}, graph 1 nohead dt 2 lw 1.5 lc rgb '#777777'")
        script.append("set logscale y" if metric in ("weight_peak", "meta_grad_norm")
                      else "unset logscale y")
        plots = []
        for j, (label, _) in enumerate(runs):
            points = data[label][0].get((source, metric))
            if not points:
                continue
            path = os.path.join(tmp, f"{i}_{j}.dat")
            with open(path, "w") as f:
                f.writelines(f"{s} {v}\n" for s, v in points)
            # (each run keeps its color in every panel, logged there or not)
            plots.append(f"'{path}' using 1:2 with lines lw 1.5 lc {j + 1} title '{label}'")
        script.append("plot " + ", ".join(plots) if plots else
                      "plot NaN title 'not logged'")
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
    print(png)


if __name__ == "__main__":
    main(sys.argv)
