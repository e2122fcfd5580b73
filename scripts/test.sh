#!/usr/bin/env bash
# Runs mlo's whole test suite, setting up first when needed: installs the Debian packages if any
# is missing (a second when all are there), builds what changed (configuring build/ first if
# needed), then runs every test through CTest. Extra arguments go to ctest, e.g.
# `scripts/test.sh -R hypergrad`. MLO_SKIP_APT=1 never touches packages.
#
# Usage: scripts/test.sh [--sanitize | --torch2] [ctest arguments...]
#   --sanitize   build with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/ (its own
#                build dir and precompiled header) the library and the tests of the areas where
#                the library's own memory handling is exercised (MLO_SANITIZE_AREAS, default:
#                base core hypergrad memory data io run dist), and run them under the sanitizers
#                (but the cases tagged [long]: tests/CMakeLists.txt)
#   --torch2     the LibTorch 2.x lane: set up and build build-torch2/ (scripts/setup.sh
#                --torch2: PyPI's torch wheel in .venv/) and run the whole suite there
# Environment: MLO_BUILD_DIR (default: build, or build-asan with --sanitize), MLO_JOBS (build
# jobs, default: nproc), MLO_TEST_JOBS (tests run in parallel, default: 2).
# Exits non-zero if the build or any test fails (with --sanitize: also on any sanitizer report).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

sanitize=0
torch2=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
elif [ "${1:-}" = "--torch2" ]; then
  torch2=1
  shift
elif [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi

if [ "${torch2}" = "1" ]; then
  # The wheel, the configure line and the build are setup.sh's (incremental when run again).
  scripts/setup.sh --torch2
else
  scripts/setup.sh --deps-only
fi

jobs="${MLO_JOBS:-$(nproc)}"
test_jobs="${MLO_TEST_JOBS:-2}"
configure_args=(-DCMAKE_BUILD_TYPE=Release)
ctest_args=("$@")

if [ "${sanitize}" = "1" ]; then
  build_dir="${MLO_BUILD_DIR:-build-asan}"
  # -O0: UBSan's checks make optimizing slow to compile, and the tests' arithmetic runs in
  # LibTorch (optimized, not instrumented), so unoptimized code of mlo's own costs them little;
  # stack traces are exact. -g1 gives line numbers in reports at a fraction of full debug
  # info's build time.
  # NOTE: the command line's and the tools' tests (cli/, tools/: processes of the mlo program
  # driving the same library code, whose outcomes the plain build checks), the models' and the
  # ready-made problems' own tests (nn/, problems/: the run/ tests build and train those problems
  # under the sanitizers too) and the consumer check (a separate, uninstrumented project) are
  # left to the plain build; on 2 cores this halves the sanitizer build and its run.
  sanitize_areas="${MLO_SANITIZE_AREAS:-base core hypergrad memory data io run dist}"
  configure_args+=("-DMLO_SANITIZE=address,undefined" "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -g1"
    -DMLO_BUILD_EXAMPLES=OFF -DMLO_BUILD_BENCH=OFF "-DMLO_TEST_AREAS=${sanitize_areas// /;}")
  # Any report fails the test: halt_on_error with -fno-sanitize-recover=all (CMakeLists.txt)
  # turns every UBSan finding into a non-zero exit, with a stack trace to read.
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:${UBSAN_OPTIONS}}"
  # Leak checks are on (LeakSanitizer, part of ASan): problems hold non-owning handles to each
  # other and the engine owns them, so a test that leaks has a real leak. Nothing is suppressed:
  # LibTorch is not instrumented, and ASan reports nothing in it.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
elif [ "${torch2}" = "1" ]; then
  build_dir="${MLO_BUILD_DIR:-build-torch2}"
else
  build_dir="${MLO_BUILD_DIR:-build}"
fi

if [ ! -f "${build_dir}/CMakeCache.txt" ]; then
  echo "==> ${build_dir}/ is not configured yet; configuring"
  cmake -S . -B "${build_dir}" "${configure_args[@]}"
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
ctest --test-dir "${build_dir}" --output-on-failure -j "${test_jobs}" \
  ${ctest_args[@]+"${ctest_args[@]}"}
