#!/usr/bin/env bash
# Compile-only check of mlo's CUDA code paths: builds every source with `#if MLO_WITH_CUDA` code
# with CUDA on (CMake target mlo_cuda_check, objects only: nothing linked, nothing run) against
# the LibTorch found by CMake and the CUDA toolkit's headers. No GPU needed.
#
# Usage: scripts/cuda_check.sh [extra cmake configure arguments...]
# Environment: MLO_CUDA_CHECK_DIR (build dir, default: build-cuda-check), CUDA_HOME (default:
# /usr/local/cuda), MLO_JOBS (default: nproc).
# Skips (exit 0, with a message) when the CUDA toolkit is absent; exits non-zero if any source
# fails to compile.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  -h | --help)
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
build_dir="${MLO_CUDA_CHECK_DIR:-build-cuda-check}"
jobs="${MLO_JOBS:-$(nproc)}"

if [ ! -f "${cuda_home}/include/cuda_runtime_api.h" ]; then
  echo "==> CUDA compile check skipped: no CUDA toolkit at ${cuda_home} (set CUDA_HOME)."
  exit 0
fi

echo "==> Configuring the CUDA compile check in ${build_dir}/ (CUDA at ${cuda_home})"
mkdir -p "${build_dir}"
log="${build_dir}/configure.log"
if ! cmake -S . -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release -DMLO_CUDA_COMPILE_CHECK=ON \
  -DCUDAToolkit_ROOT="${cuda_home}" -DMLO_USE_PCH=OFF -DMLO_BUILD_TESTS=OFF \
  -DMLO_BUILD_EXAMPLES=OFF -DMLO_BUILD_BENCH=OFF "$@" >"${log}" 2>&1; then
  cat "${log}"
  exit 1
fi
grep -E '^-- mlo' "${log}" || true

echo "==> Compiling with MLO_WITH_CUDA=1 (${jobs} jobs)"
cmake --build "${build_dir}" -j "${jobs}" --target mlo_cuda_check

echo "==> CUDA compile check passed; compiled:"
find "${build_dir}/CMakeFiles/mlo_cuda_check.dir" -name '*.o' | sort |
  sed -e "s|^${build_dir}/CMakeFiles/mlo_cuda_check.dir/|  |" -e 's|\.o$||'
