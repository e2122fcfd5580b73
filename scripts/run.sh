#!/usr/bin/env bash
# Runs an experiment with `mlo run`, setting everything up first when needed: installs the
# Debian packages if any is missing and builds build/ (incrementally; both steps take a second
# when there is nothing to do).
#
# Usage: scripts/run.sh [CONFIG.yaml] [mlo run options...]
#   CONFIG.yaml    the experiment (default: configs/reweight_lt_fmnist.yaml, the main job)
#   options        passed to `mlo run`, e.g. --set engine.train_iters=500, --resume, --seeds 0-4
# Examples:
#   scripts/run.sh
#   scripts/run.sh configs/hpo_logreg.yaml --set problems.inner.method=cg
# Environment: MLO_BUILD_DIR (default: build), MLO_SKIP_APT=1 to never touch packages.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

config="configs/reweight_lt_fmnist.yaml"
if [ "$#" -gt 0 ]; then
  case "$1" in
    -h | --help)
      sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*) ;;
    *)
      config="$1"
      shift
      ;;
  esac
fi
if [ ! -f "${config}" ]; then
  echo "error: no config file '${config}' (run from any folder; paths are relative to $(pwd))" >&2
  exit 2
fi

build_dir="${MLO_BUILD_DIR:-build}"
scripts/setup.sh --deps-only
if [ ! -f "${build_dir}/CMakeCache.txt" ]; then
  echo "==> ${build_dir}/ is not configured yet; configuring (Release)"
  cmake -S . -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release
fi
echo "==> Building mlo"
cmake --build "${build_dir}" -j "${MLO_JOBS:-$(nproc)}" --target mlo_tool
exec "${build_dir}/mlo" run "${config}" "$@"
