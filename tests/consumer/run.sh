#!/usr/bin/env bash
# External-consumer check, run by CTest (see tests/consumer/CMakeLists.txt):
#   1. `cmake --install` the already-built mlo into a scratch prefix;
#   2. configure tests/consumer/project (find_package(mlo) only) against that prefix;
#   3. build it and install its quickstart; 4. run the installed quickstart.
# Usage: run.sh SOURCE_DIR BUILD_DIR WORK_DIR [CXX_COMPILER] [GENERATOR] [TORCH_DIR]
set -euo pipefail

if [ "$#" -lt 3 ]; then
  echo "usage: $0 SOURCE_DIR BUILD_DIR WORK_DIR [CXX_COMPILER] [GENERATOR] [TORCH_DIR]" >&2
  exit 2
fi
source_dir="$1"
build_dir="$2"
work_dir="$3"
cxx="${4:-}"
generator="${5:-}"
torch_dir="${6:-}"

prefix="${work_dir}/mlo-install"
consumer_build="${work_dir}/consumer-build"
consumer_prefix="${work_dir}/consumer-install"

step() { printf '\n==> consumer: %s\n' "$*"; }
fail() {
  echo "consumer: FAILED: $*" >&2
  exit 1
}

rm -rf "${prefix}" "${consumer_build}" "${consumer_prefix}"
mkdir -p "${work_dir}"

step "installing mlo from ${build_dir} into ${prefix}"
cmake --install "${build_dir}" --prefix "${prefix}" || fail "cmake --install"

config="$(find "${prefix}" -name mloConfig.cmake -print -quit)"
[ -n "${config}" ] || fail "no mloConfig.cmake under ${prefix}"
# spdlog is a PRIVATE dependency of the shared library: consumers must not need it.
if grep -rlE '#include *[<"]spdlog/' "${prefix}/include" >/dev/null 2>&1; then
  grep -rlE '#include *[<"]spdlog/' "${prefix}/include" >&2
  fail "installed headers include spdlog, a private dependency of mlo"
fi

configure_args=(-S "${source_dir}/tests/consumer/project" -B "${consumer_build}"
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_PREFIX_PATH="${prefix}"
  -DCMAKE_INSTALL_PREFIX="${consumer_prefix}"
  -DMLO_SOURCE_DIR="${source_dir}")
[ -n "${cxx}" ] && configure_args+=(-DCMAKE_CXX_COMPILER="${cxx}")
[ -n "${generator}" ] && configure_args+=(-G "${generator}")
[ -n "${torch_dir}" ] && configure_args+=(-DTorch_DIR="${torch_dir}")

step "configuring the consumer project"
cmake "${configure_args[@]}" || fail "configuring tests/consumer/project"

# The package must come from the scratch prefix, not from the build tree.
found_dir="$(sed -n 's/^mlo_DIR:[A-Z]*=//p' "${consumer_build}/CMakeCache.txt")"
case "$(cd "${found_dir}" && pwd -P)" in
  "$(cd "${prefix}" && pwd -P)"/*) echo "consumer: mlo found in ${found_dir}" ;;
  *) fail "mlo was found in ${found_dir}, not in ${prefix}" ;;
esac

step "building the quickstart"
cmake --build "${consumer_build}" -j "$(nproc)" || fail "building the quickstart"
cmake --install "${consumer_build}" || fail "installing the quickstart"

quickstart="${consumer_prefix}/bin/quickstart"
[ -x "${quickstart}" ] || fail "no ${quickstart}"
# The installed program must load the installed libmlo, found through its RPATH.
if command -v ldd >/dev/null 2>&1; then
  libmlo="$(ldd "${quickstart}" | awk '/libmlo\.so/ {print $3}')"
  case "$(readlink -f "${libmlo:-/nonexistent}")" in
    "$(cd "${prefix}" && pwd -P)"/*) echo "consumer: quickstart loads ${libmlo}" ;;
    *) fail "installed quickstart loads libmlo from '${libmlo}', expected ${prefix}" ;;
  esac
fi

step "running ${quickstart}"
"${quickstart}" || fail "the installed quickstart exited with $?"
echo "consumer: OK (find_package(mlo), build, install and run)"
