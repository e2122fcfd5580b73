#!/usr/bin/env bash
# The long-tail table of docs/reweighting.md: plain cross-entropy, the two one-level baselines
# (class-balanced, logit-adjusted), Meta-Weight-Net, the class-aware weight net and Learning to
# Reweight on long-tailed Fashion-MNIST, at several run lengths, on the reference recipe
# (imbalance 100, balanced meta set of 1000, no augmentation, small CNN with batch norm, batch
# 100, SGD 0.05 momentum 0.9 wd 5e-4, LR x0.1 at 60% and 85% of the steps, DARTS with unroll 1;
# weight nets: Adam 1e-3, wd 1e-4). Every method is validated 20 times per run and evaluated with
# the parameters of its best validation (engine.early_stopping with restore_best, never stopping
# early). Each run goes to $OUT/<steps>/<method>/seed_<s>; finished seeds are kept (--resume).
# With NOISE=<type>:<ratio> (uniform or flip) the training labels are corrupted and the classes
# balanced (data.imbalance 1) instead: the noisy-label table.
#   scripts/reweight_table.sh [SEEDS] [LENGTHS] [METHODS...]
#   scripts/reweight_table.sh 0-4 500,2000,5000          # the whole long-tail table
#   JOBS=1 scripts/reweight_table.sh 1 2000 baseline mwn  # some cells, one process at a time
#   OUT=runs/noise_uniform40 NOISE=uniform:0.4 scripts/reweight_table.sh 0-4 2000 \
#     baseline mwn class_mwn l2rw                         # 40% uniform noise
# Then: scripts/reweight_summary.py $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-0-4}
LENGTHS=${2:-500,2000,5000}
shift $(( $# > 2 ? 2 : $# ))
METHODS=("$@")
[ ${#METHODS[@]} -eq 0 ] && METHODS=(baseline class_balanced logit_adjusted mwn class_mwn l2rw)
KNOWN="baseline class_balanced logit_adjusted mwn class_mwn l2rw class_mwn_la learned_loss"
KNOWN="$KNOWN learned_loss_cw"
MLO=${MLO:-build/mlo}
OUT=${OUT:-runs/reweight_table}
JOBS=${JOBS:-2}  # runs at a time (each on one thread)
DATA=()
if [ -n "${NOISE:-}" ]; then
  case ${NOISE%%:*} in
    uniform|flip) ;;
    *) echo "NOISE must be uniform:<ratio> or flip:<ratio>, got '$NOISE'" >&2; exit 2 ;;
  esac
  DATA=(--set data.imbalance=1 --set data.label_noise.type="${NOISE%%:*}"
        --set data.label_noise.ratio="${NOISE#*:}")
fi

run() {  # run STEPS NAME CONFIG [--set ...]
  local steps=$1 name=$2 config=$3
  shift 3
  local out="$OUT/$steps/$name" start
  mkdir -p "$OUT/$steps"
  start=$(date +%s)
  echo "== $name ($SEEDS, $steps steps) -> $out"
  nice -n 10 "$MLO" run "$config" --no-progress --resume --seeds "$SEEDS" --out "$out" \
    --set engine.train_iters="$steps" --set engine.valid_step="$(( steps / 20 ))" \
    --set engine.log_step="$(( steps / 100 ))" --set engine.save_step=0 \
    --set engine.early_stopping.enabled=true --set engine.early_stopping.tolerance=1000 \
    --set engine.early_stopping.restore_best=true \
    --set data.meta_size=1000 --set data.augment=false \
    --set problems.classifier.model.batch_norm=true \
    --set "problems.classifier.scheduler.milestones=[$(( steps * 60 / 100 )),$(( steps * 85 / 100 ))]" \
    ${DATA[@]+"${DATA[@]}"} "$@" > "$out.log" 2>&1 || { echo "!! $name, $steps steps failed: $out.log" >&2; return 1; }
  printf '%s\t%s\t%s\n' "$steps" "$name" "$(( $(date +%s) - start ))" >> "$OUT/times.tsv"
}

cell() {  # cell STEPS METHOD
  case $2 in
    baseline) run "$1" baseline configs/baseline_lt_fmnist.yaml ;;
    # The baselines' and the methods' settings are the ones chosen on the validation split
    # (docs/reweighting.md).
    class_balanced) run "$1" class_balanced configs/baseline_lt_fmnist.yaml \
                      --set reweighting.method=class_balanced ;;
    logit_adjusted) run "$1" logit_adjusted configs/baseline_lt_fmnist.yaml \
                      --set reweighting.method=logit_adjusted ;;
    # (the config's delayed floor is class_mwn's; mwn takes the floor chosen for it, from the
    # first step)
    mwn) run "$1" mwn configs/reweight_lt_fmnist.yaml --set reweighting.method=mwn \
           --set reweighting.mwn.weight_floor=0.1 --set reweighting.mwn.weight_floor_after=0 ;;
    class_mwn) run "$1" class_mwn configs/reweight_lt_fmnist.yaml ;;
    l2rw) run "$1" l2rw configs/l2rw_lt_fmnist.yaml ;;
    # class_mwn's weights on logit-adjusted losses (tau 1).
    class_mwn_la) run "$1" class_mwn_la configs/reweight_lt_fmnist.yaml \
                    --set reweighting.class_mwn.logit_adjustment=1 ;;
    # The learned loss: logit terms only, and with class weights.
    learned_loss) run "$1" learned_loss configs/learned_loss_lt_fmnist.yaml ;;
    learned_loss_cw) run "$1" learned_loss_cw configs/learned_loss_lt_fmnist.yaml \
                       --set reweighting.learned_loss.class_weights=true ;;
  esac
}

for method in "${METHODS[@]}"; do
  case $method in
    baseline|class_balanced|logit_adjusted|mwn|class_mwn|l2rw|class_mwn_la|learned_loss|learned_loss_cw) ;;
    *) echo "unknown method '$method' ($KNOWN)" >&2
       exit 2 ;;
  esac
done
mkdir -p "$OUT"
[ "$JOBS" -ge 1 ] || { echo "JOBS must be >= 1, got $JOBS" >&2; exit 2; }
failed=0
pids=()
IFS=, read -r -a lengths <<< "$LENGTHS"
for steps in "${lengths[@]}"; do
  for method in "${METHODS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
    cell "$steps" "$method" &
    pids+=($!)
  done
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
python3 scripts/reweight_summary.py "$OUT"
exit $failed
