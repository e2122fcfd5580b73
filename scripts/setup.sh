#!/usr/bin/env bash
# Installs mlo's dependencies from Debian 12 and builds mlo (Release) into build/.
#
# Usage: scripts/setup.sh [--torch2] [--skip-apt] [--deps-only] [--check-tools]
#                         [--fetch-wheel=DIR] [cmake args...]
#   --torch2         the LibTorch 2.x lane: installs PyPI's torch wheel (CUDA build) into .venv/
#                    in the checkout and builds build-torch2/ against its LibTorch, with CUDA
#                    found in CUDA_HOME (default /usr/local/cuda); without it, Debian's 1.13 (CPU)
#   --skip-apt       do not install packages (also: MLO_SKIP_APT=1), e.g. when building
#                    against your own LibTorch: scripts/setup.sh --skip-apt -DCMAKE_PREFIX_PATH=/opt/libtorch
#   --deps-only      install the packages (and with --torch2 the wheel), do not build
#   --check-tools    also install what scripts/fuzz.sh needs (clang, libFuzzer), doxygen (the API
#                    reference) and, from PyPI into .venv/, the tensorboard package the event-file
#                    test reads with; CI uses it
#   --fetch-wheel=DIR  only download the 2.x lane's wheel and its dependencies into DIR,
#                    installing and building nothing; a later `--torch2` with PIP_NO_INDEX=1
#                    PIP_FIND_LINKS=DIR installs from there. CI fetches while the 1.13 lane builds
# Environment: MLO_BUILD_DIR (default: build, or build-torch2 with --torch2), MLO_JOBS (default:
# nproc), MLO_TORCH_SPEC (the wheel pip installs, default: torch==2.15.*), MLO_TENSORBOARD_SPEC
# (with --check-tools, default: tensorboard==2.21.*).
#
# Safe to run again: packages already installed are not fetched again, and the build is incremental.
set -euo pipefail

start_dir="${PWD}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Everything mlo needs, from Debian 12 (bookworm).
PACKAGES=(
  build-essential cmake git pkg-config
  libtorch-dev
  libyaml-cpp-dev libspdlog-dev catch2 libcli11-dev libgloo-dev zlib1g-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libboost-dev  # TensorBoard event files (Boost.CRC)
  # data.download: HTTP(S), MD5, tar archives; the certificates that HTTPS servers are checked
  # against (libcurl only recommends them)
  libcurl4-openssl-dev libssl-dev libarchive-dev ca-certificates
  dataset-fashion-mnist
  gnuplot-nox  # mlo ablate: the PNG chart
)
# For scripts/fuzz.sh (libFuzzer ships in clang's runtime package); GCC's sanitizers, used by
# scripts/test.sh --sanitize, come with build-essential; python3-venv for .venv/, where the
# tensorboard package (PyPI) reads the event files back in a test; doxygen for the API
# reference (`cmake --build build --target docs`, built by CI with warnings as errors);
# libcpuinfo-dev for scripts/as_avx2_cpu.sh (the suite as on a CPU without AVX-512).
CHECK_PACKAGES=(clang libclang-rt-14-dev python3-venv doxygen libcpuinfo-dev)
check_tools=0

skip_apt="${MLO_SKIP_APT:-0}"
fetch_dir=""
deps_only=0
torch2=0
cmake_args=()
for arg in "$@"; do
  case "${arg}" in
    --torch2)
      torch2=1
      PACKAGES+=(python3-venv)
      ;;
    --skip-apt) skip_apt=1 ;;
    --deps-only) deps_only=1 ;;
    --check-tools)
      PACKAGES+=("${CHECK_PACKAGES[@]}")
      check_tools=1
      ;;
    --fetch-wheel=*)
      fetch_dir="${arg#--fetch-wheel=}"
      if [ -z "${fetch_dir}" ]; then
        echo "error: --fetch-wheel=DIR needs a folder" >&2
        exit 2
      fi
      # (relative to where the script was started, not to the checkout it changes into)
      case "${fetch_dir}" in /*) ;; *) fetch_dir="${start_dir}/${fetch_dir}" ;; esac
      PACKAGES+=(python3-venv)
      ;;
    -h | --help)
      sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) cmake_args+=("${arg}") ;;
  esac
done

log() { printf '\n==> %s\n' "$*"; }

install_packages() {
  local missing=()
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q '^install ok installed$'; then
      missing+=("${pkg}")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    log "All Debian packages are already installed."
    return
  fi

  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "error: not root and sudo is not available; install these packages as root:" >&2
      echo "  apt-get install ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  log "Installing Debian packages: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

if [ "${skip_apt}" = "1" ]; then
  log "Skipping package installation (MLO_SKIP_APT=1 or --skip-apt)."
elif ! command -v apt-get >/dev/null 2>&1; then
  echo "error: apt-get not found; this script targets Debian 12. Install the equivalents of:" >&2
  echo "  ${PACKAGES[*]}" >&2
  echo "then run again with --skip-apt." >&2
  exit 1
else
  install_packages
fi

# The event-file test's reader: TensorBoard's own package, in .venv/ (ignored by git).
if [ "${check_tools}" = "1" ]; then
  tensorboard_spec="${MLO_TENSORBOARD_SPEC:-tensorboard==2.21.*}"
  if [ ! -x .venv/bin/python ]; then
    log "Creating .venv/ (Python virtual environment for the tensorboard package)"
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import tensorboard" >/dev/null 2>&1; then
    log "Installing ${tensorboard_spec} from PyPI into .venv/ (the event-file test's reader)"
    .venv/bin/pip install --progress-bar off "${tensorboard_spec}"
  fi
fi

torch_spec="${MLO_TORCH_SPEC:-torch==2.15.*}"
if [ -n "${fetch_dir}" ]; then
  if [ ! -x .venv/bin/python ]; then
    log "Creating .venv/ (Python virtual environment for pip)"
    python3 -m venv .venv
  fi
  log "Downloading ${torch_spec} and its dependencies into ${fetch_dir}/ (nothing is installed)"
  mkdir -p "${fetch_dir}"
  # (not into pip's cache as well: the files are on disk once)
  exec .venv/bin/pip download --no-cache-dir --progress-bar off --dest "${fetch_dir}" \
    "${torch_spec}"
fi

# The LibTorch 2.x lane: PyPI's torch wheel in .venv/ (ignored by git), its LibTorch found
# through torch.utils.cmake_prefix_path, the CUDA toolkit for its CUDA libraries.
if [ "${torch2}" = "1" ]; then
  cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  if [ ! -x "${cuda_home}/bin/nvcc" ]; then
    echo "error: the LibTorch 2.x lane needs the CUDA toolkit (its wheel is a CUDA build), and" \
      "${cuda_home}/bin/nvcc is missing; set CUDA_HOME to the toolkit's folder" >&2
    exit 1
  fi
  if [ ! -x .venv/bin/python ]; then
    log "Creating .venv/ (Python virtual environment for the torch wheel)"
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    log "Installing ${torch_spec} from PyPI into .venv/ (about 5 GB with its CUDA libraries)"
    .venv/bin/pip install --progress-bar off "${torch_spec}"
  fi
  torch_root="$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))' \
    2>/dev/null)"
  log "LibTorch $(.venv/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null)" \
    "from ${torch_root}"
  # NOTE: the wheel's root as well as its share/cmake: TorchConfig's find_library searches the
  # system folders before the wheel's, and would find Debian's libtorch.so (cmake/MloTorch.cmake).
  cmake_args=("-DCMAKE_PREFIX_PATH=${torch_root}/share/cmake;${torch_root}"
    "-DCUDAToolkit_ROOT=${cuda_home}" "-DCMAKE_CUDA_COMPILER=${cuda_home}/bin/nvcc"
    ${cmake_args[@]+"${cmake_args[@]}"})
fi

if [ "${deps_only}" = "1" ]; then
  log "Done (--deps-only): nothing built."
  exit 0
fi

if [ "${torch2}" = "1" ]; then
  build_dir="${MLO_BUILD_DIR:-build-torch2}"
else
  build_dir="${MLO_BUILD_DIR:-build}"
fi
jobs="${MLO_JOBS:-$(nproc)}"

log "Configuring (Release) in ${build_dir}/"
cmake -S . -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]+"${cmake_args[@]}"}"

log "Building with ${jobs} jobs"
cmake --build "${build_dir}" -j "${jobs}"

log "Built. Next steps:"
printf '  %-30s # %s\n' "${build_dir}/examples/quickstart" "run the two-level example" \
  "scripts/test.sh" "run the whole test suite"
