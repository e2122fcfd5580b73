#!/usr/bin/env bash
# Runs mlo's whole test suite: builds what changed (configuring build/ first if needed), then
# runs every test through CTest. Extra arguments go to ctest, e.g. `scripts/test.sh -R hypergrad`.
# Environment: MLO_BUILD_DIR (default: build), MLO_JOBS (build jobs, default: nproc),
# MLO_TEST_JOBS (tests run in parallel, default: 2).
# Exits non-zero if the build or any test fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir="${MLO_BUILD_DIR:-build}"
jobs="${MLO_JOBS:-$(nproc)}"
test_jobs="${MLO_TEST_JOBS:-2}"

if [ ! -f "${build_dir}/CMakeCache.txt" ]; then
  echo "==> ${build_dir}/ is not configured yet; configuring (Release)"
  cmake -S . -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release
fi

echo "==> Building (${jobs} jobs)"
cmake --build "${build_dir}" -j "${jobs}"

# NOTE: with several tests at once on a small machine, one intra-op thread per test avoids
# oversubscribing the cores (LibTorch's tensors in the tests are small). Set OMP_NUM_THREADS
# yourself to override.
if [ "${test_jobs}" -gt 1 ] && [ -z "${OMP_NUM_THREADS:-}" ]; then
  export OMP_NUM_THREADS=1
fi

echo "==> Running the tests (${test_jobs} at a time)"
ctest --test-dir "${build_dir}" --output-on-failure -j "${test_jobs}" "$@"
