#!/usr/bin/env bash
# Fuzzes `mlo run`'s YAML configuration reader with libFuzzer for a bounded time: installs the
# already-built mlo of build/ (scripts/setup.sh) into build-fuzz/mlo/, builds the target
# tests/fuzz/yaml_fuzz.cpp with clang (AddressSanitizer + UBSan, the reader's sources instrumented)
# as a project of its own against it in build-fuzz/, seeds it with the shipped configs
# (configs/**/*.yaml) and a dictionary of the schema's keys, and prints the number of executions
# and the result.
#
# Usage: scripts/fuzz.sh [SECONDS]     (default: 60)
# Environment: MLO_BUILD_DIR (the built mlo, default: build), MLO_FUZZ_DIR (default: build-fuzz),
# MLO_FUZZ_CXX (default: clang++), MLO_JOBS (default: nproc).
# Exits non-zero on a finding: a crash, a sanitizer report, or an exception other than
# mlo::Error; the input that caused it is saved under build-fuzz/artifacts/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  -h | --help)
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

seconds="${1:-60}"
build_dir="${MLO_FUZZ_DIR:-build-fuzz}"
mlo_build="${MLO_BUILD_DIR:-build}"
cxx="${MLO_FUZZ_CXX:-clang++}"
jobs="${MLO_JOBS:-$(nproc)}"

if ! command -v "${cxx}" >/dev/null 2>&1; then
  echo "error: ${cxx} not found; libFuzzer needs clang (Debian: apt-get install clang" \
    "libclang-rt-14-dev)" >&2
  exit 1
fi
if [ ! -f "${mlo_build}/CMakeCache.txt" ]; then
  echo "error: ${mlo_build}/ holds no build of mlo; build it first (scripts/setup.sh)" >&2
  exit 1
fi

echo "==> Installing the mlo of ${mlo_build}/ into ${build_dir}/mlo/"
mkdir -p "${build_dir}"
cmake --build "${mlo_build}" -j "${jobs}" --target mlo_core mlo_run >"${build_dir}/library.log" 2>&1 ||
  { cat "${build_dir}/library.log"; exit 1; }
rm -rf "${build_dir}/mlo"
cmake --install "${mlo_build}" --prefix "${build_dir}/mlo" >"${build_dir}/install.log" 2>&1 ||
  { cat "${build_dir}/install.log"; exit 1; }
torch_dir="$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "${mlo_build}/CMakeCache.txt")"

echo "==> Building the fuzz target with ${cxx} in ${build_dir}/"
# (a folder configured from another source, e.g. the whole repository, is configured afresh)
if [ -f "${build_dir}/CMakeCache.txt" ] &&
  ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$(pwd)/tests/fuzz$" "${build_dir}/CMakeCache.txt"; then
  rm -rf "${build_dir}/CMakeCache.txt" "${build_dir}/CMakeFiles"
fi
if ! CXX="${cxx}" cmake -S tests/fuzz -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$(pwd)/${build_dir}/mlo" -DMLO_SOURCE_DIR="$(pwd)" \
  ${torch_dir:+-DTorch_DIR="${torch_dir}"} >"${build_dir}/configure.log" 2>&1; then
  cat "${build_dir}/configure.log"
  exit 1
fi
cmake --build "${build_dir}" -j "${jobs}" --target yaml_fuzz

# The seeds: every shipped config. libFuzzer adds what it finds to corpus/ (kept between runs).
corpus="${build_dir}/corpus"
mkdir -p "${corpus}" "${build_dir}/artifacts"
find configs -name '*.yaml' -exec cp {} "${corpus}/" \;

# A dictionary of every key and enum value the schema, the methods and the experiments know, so
# mutations speak its language.
dict="${build_dir}/schema.dict"
grep -oh '"[a-z0-9_]*"' src/run/schema.h src/hypergrad/*.cpp problems/*/settings.cpp \
  problems/*/experiment.cpp | sort -u | sed 's/^"\(.*\)"$/"\1: "/' >"${dict}"

echo "==> Fuzzing for ${seconds} s"
log="${build_dir}/fuzz.log"
# NOTE: leaks are checked (the reader allocates only through yaml-cpp and the STL).
status=0
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  "${build_dir}/yaml_fuzz" -max_total_time="${seconds}" -dict="${dict}" -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="${build_dir}/artifacts/" -print_final_stats=1 \
  "${corpus}" >"${log}" 2>&1 || status=$?

runs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\)/\1 executions/p' "${log}")"
if [ "${status}" -ne 0 ]; then
  tail -n 60 "${log}"
  echo "==> Fuzzing FAILED (exit ${status}) after ${runs:-? runs}; inputs that failed:"
  ls "${build_dir}/artifacts/"
  exit "${status}"
fi
grep -E '^stat::(new_units_added|peak_rss_mb)' "${log}" || true
echo "==> Fuzzing passed: ${runs:-? runs} in ${seconds} s, no finding (log: ${log})"
