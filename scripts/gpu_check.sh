#!/usr/bin/env bash
# mlo on a GPU machine that has PyTorch with CUDA but reaches no package registry (a typical
# locked-down GPU node), in two steps:
#
#   scripts/gpu_check.sh --prepare
#       where Debian 12's archive is reachable: downloads the .deb files of mlo's other
#       dependencies (yaml-cpp, spdlog, {fmt}, Catch2, CLI11, nlohmann-json, zlib's headers, the
#       Fashion-MNIST data) into .gpu-debs/ (ignored by git). Copy the checkout, .gpu-debs/
#       included, to the GPU machine.
#   scripts/gpu_check.sh REPORT_DIR [--python PYTHON] [--cpu-only] [--gpu-only]
#       on the GPU machine: unpacks the .debs into .gpu-prefix/, configures build-gpu/ against
#       PYTHON's LibTorch (default python3; torch.utils.cmake_prefix_path), builds it with every
#       core, runs the whole test suite (the [cuda] tests included), the main job on CUDA
#       (configs/reweight_lt_fmnist.yaml, real Fashion-MNIST where its .deb came along), and the
#       whole `mlo ablate` on CUDA at batch 100 (every single-GPU row, fp16 with loss scaling), for
#       the ReLU and the Swish ResNet-50, then writes REPORT_DIR/report.md: tests passed, the
#       ablation tables (peak and reserved MiB, savings, time ratios), the GPU's name and driver.
#       Without a visible GPU it stops after the CPU half (unpack, configure, build, the test
#       suite with the [cuda] tests skipped and their reason) and exits 2; --cpu-only makes that
#       the intended outcome (exit 0). --gpu-only builds only the `mlo` program and the
#       [cuda] tests and skips the CPU test suite (which every CI lane runs anyway): for a GPU
#       lent by the minute, where the build and the GPU's own checks must fit in a few minutes.
#       --no-ablate skips the ablation (a check of the methods alone); --main-set KEY=VALUE
#       (repeatable) is passed to the main job as --set. The forward-mode benchmark
#       (bench/forward_mode: darts, cg and neumann, reverse against forward mode) runs on CUDA
#       after the main job, then mlo against Betty (bench/peers/compare.py --device cuda) when
#       --prepare also fetched Betty's wheel (installed into .gpu-prefix/python for PYTHON).
# Environment: CUDA_HOME (default /usr/local/cuda), MLO_JOBS (default: nproc), MLO_ABLATE_RUNS
# (default 1: each ablation runs that many times in a row, into ablation_<variant>_run<k>, so the
# report shows whether two runs agree). Without the dataset-fashion-mnist .deb (it is 31 MB, the
# most of .gpu-debs/), the main job runs on synthetic data of the same shapes and says so.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
debs="${root}/.gpu-debs"
prefix="${root}/.gpu-prefix"
build="${root}/build-gpu"

# The Debian 12 packages mlo builds against, with the shared libraries they need at run time
# (the base system's C and C++ runtimes aside).
PACKAGES=(
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  catch2 libcli11-dev nlohmann-json3-dev zlib1g-dev zlib1g
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32  # TensorBoard
  libboost1.74-dev  # Boost.CRC (header-only), the event files' CRC-32C
  dataset-fashion-mnist
)
# NOTE: no libcurl, OpenSSL or libarchive: the build here has no dataset downloads
# (-DMLO_WITH_DOWNLOAD=OFF), which the check does not need (its data is synthetic or Debian's).

log() { printf '\n==> %s\n' "$*"; }
die() { echo "gpu_check: error: $*" >&2; exit 1; }

if [ "${1:-}" = "--prepare" ]; then
  command -v apt-get >/dev/null 2>&1 || die "--prepare needs apt-get (Debian 12's archive)"
  mkdir -p "${debs}"
  log "Downloading ${#PACKAGES[@]} packages into ${debs#"${root}/"}/"
  (cd "${debs}" && apt-get download "${PACKAGES[@]}")
  # Betty for bench/peers (a pure-Python wheel; its imports, torch and numpy, come with PyTorch).
  python3 -m pip download --quiet --no-deps --ignore-requires-python betty-ml==0.2.1 \
    -d "${debs}/wheels" || log "no Betty wheel (pip could not fetch it): the GPU check skips bench/peers"
  ls -1 "${debs}"/*.deb | sed "s|^${root}/|  |"
  log "Prepared. Copy this checkout, ${debs#"${root}/"}/ included, to the GPU machine and run there:"
  echo "  scripts/gpu_check.sh REPORT_DIR [--python PYTHON]"
  exit 0
fi

report_dir=""
python="python3"
cpu_only=0
gpu_only=0
no_ablate=0
main_set=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-ablate) no_ablate=1; shift ;;
    --main-set) [ $# -ge 2 ] || die "--main-set needs KEY=VALUE"; main_set+=(--set "$2"); shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --cpu-only) cpu_only=1; shift ;;
    --gpu-only) gpu_only=1; shift ;;
    -h | --help) sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "${report_dir}" ] || die "one REPORT_DIR, got '${report_dir}' and '$1'"; report_dir="$1"; shift ;;
  esac
done
[ -n "${report_dir}" ] || die "give the folder for the report: scripts/gpu_check.sh REPORT_DIR"
ls "${debs}"/*.deb >/dev/null 2>&1 ||
  die "no .deb files in ${debs#"${root}/"}/: run scripts/gpu_check.sh --prepare where Debian's archive is reachable"
mkdir -p "${report_dir}"
report_dir="$(cd "${report_dir}" && pwd)"
jobs="${MLO_JOBS:-$(nproc)}"
ablate_runs="${MLO_ABLATE_RUNS:-1}"
[[ "${ablate_runs}" =~ ^[1-9][0-9]*$ ]] ||
  die "MLO_ABLATE_RUNS must be a whole number >= 1, got '${ablate_runs}'"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
started=$(date +%s)

log "Unpacking $(ls "${debs}"/*.deb | wc -l) packages into ${prefix#"${root}/"}/"
rm -rf "${prefix}"
mkdir -p "${prefix}"
for deb in "${debs}"/*.deb; do dpkg-deb -x "${deb}" "${prefix}"; done
# A package's absolute links (libz.so -> /lib/.../libz.so.1.2.13) point into the unpacked tree.
while IFS= read -r link; do
  target="$(readlink "${link}")"
  if [ "${target#/}" != "${target}" ] && [ -e "${prefix}${target}" ]; then
    ln -sfn "${prefix}${target}" "${link}"
  fi
done < <(find "${prefix}" -type l)

torch_root="$("${python}" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" ||
  die "${python} cannot import torch (give the Python that has PyTorch: --python PATH)"
torch_version="$("${python}" -c 'import torch; print(torch.__version__)')"
log "LibTorch ${torch_version} from ${torch_root}"

# Each unpacked package's CMake config by its own <Name>_DIR: the unpacked tree is not a
# system prefix, and its lib/<arch>/cmake folders are not searched for it.
cmake_args=("-DCMAKE_BUILD_TYPE=Release"
  "-DCMAKE_PREFIX_PATH=${torch_root}/share/cmake;${torch_root};${prefix}/usr"
  "-DZLIB_ROOT=${prefix}/usr" "-DCUDAToolkit_ROOT=${cuda_home}" -DMLO_WITH_DOWNLOAD=OFF
  "-DProtobuf_PROTOC_EXECUTABLE=${prefix}/usr/bin/protoc"
  "-DProtobuf_INCLUDE_DIR=${prefix}/usr/include"
  "-DMLO_PROTOBUF_LIBRARY=$(find "${prefix}" -name 'libprotobuf.so' | head -1)"
  "-DBoost_INCLUDE_DIR=${prefix}/usr/include")
[ -x "${cuda_home}/bin/nvcc" ] && cmake_args+=("-DCMAKE_CUDA_COMPILER=${cuda_home}/bin/nvcc")
while IFS= read -r config; do
  name="$(basename "${config}")"
  name="${name%Config.cmake}"
  name="${name%-config.cmake}"
  cmake_args+=("-D${name}_DIR=$(dirname "${config}")")
done < <(find "${prefix}" \( -name '*Config.cmake' -o -name '*-config.cmake' \) | sort)
lib_dirs="$(find "${prefix}" -name '*.so*' -printf '%h\n' | sort -u | paste -sd: -)"
export LD_LIBRARY_PATH="${lib_dirs}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

log "Configuring ${build#"${root}/"}/"
configure_status=0
cmake -S . -B "${build}" "${cmake_args[@]}" > "${report_dir}/configure.log" 2>&1 ||
  configure_status=$?
grep -E "CUDA support|mlo:" "${report_dir}/configure.log" || true
[ "${configure_status}" = 0 ] ||
  { tail -30 "${report_dir}/configure.log"; die "configure failed (${report_dir}/configure.log)"; }
grep -q "CUDA support: 1" "${report_dir}/configure.log" ||
  die "LibTorch from ${torch_root} was not found with CUDA (${report_dir}/configure.log)"

targets=()
[ "${gpu_only}" = 1 ] && targets=(--target mlo_tool cuda_test forward_mode peers_steps)
log "Building ${targets[*]:-everything} with ${jobs} jobs"
cmake --build "${build}" -j "${jobs}" ${targets[@]+"${targets[@]}"} > "${report_dir}/build.log" 2>&1 ||
  { tail -30 "${report_dir}/build.log"; die "the build failed (${report_dir}/build.log)"; }

log "The test suite, then the [cuda] tests"
# NOTE: consumer/find_package configures a separate project against the installed mlo, which
# would need every hint above again; the lanes of .ci/run test it.
set +e
if [ "${gpu_only}" = 1 ]; then
  echo "not run (--gpu-only); the CI lanes run it" > "${report_dir}/tests.log"
  tests_status=0
else
  (cd "${build}" && ctest -j "${jobs}" --timeout 900 -E '^consumer/' -LE cuda --output-on-failure) \
    > "${report_dir}/tests.log" 2>&1
  tests_status=$?
fi
MLO_TEST_FASHION_MNIST="${prefix}/usr/share/datasets/fashion-mnist" "${build}/tests/cuda/cuda_test" \
  --durations yes > "${report_dir}/cuda_tests.log" 2>&1
cuda_status=$?
set -e
summary="$(grep -E 'tests passed|tests failed' "${report_dir}/tests.log" | tail -1 || true)"
summary="${summary:-no summary: see tests.log}"
[ "${gpu_only}" = 1 ] && summary="not run (--gpu-only)"
echo "  ${summary}"
echo "  [cuda] tests: exit ${cuda_status} ($([ "${cuda_status}" = 77 ] && echo skipped || echo ran))"

gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -1 || true)"
{
  echo "# mlo GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- LibTorch: ${torch_version} (${torch_root})"
  echo "- GPU: ${gpu:-none visible (nvidia-smi found no GPU)}"
  echo "- test suite without the [cuda] tests (on the CPU): ${summary} (log: tests.log)"
  echo "- [cuda] tests: $([ "${cuda_status}" = 0 ] && echo 'all passed' ||
    { [ "${cuda_status}" = 77 ] && echo 'skipped' || echo "FAILED (exit ${cuda_status})"; })"
  echo
  echo '```'
  if [ "${cuda_status}" = 77 ]; then
    head -15 "${report_dir}/cuda_tests.log"
  else
    # Each case (and section) with its time, the failures, the summary.
    grep -E '^[0-9]+\.[0-9]+ s: |FAILED|^test cases:|^assertions:|^All tests passed' \
      "${report_dir}/cuda_tests.log" | tail -40 || tail -15 "${report_dir}/cuda_tests.log"
  fi
  echo '```'
} > "${report_dir}/report.md"

if [ "${cuda_status}" = 77 ]; then
  echo "- the main job and the ablation on CUDA: not run (no GPU visible)" >> "${report_dir}/report.md"
  log "No GPU visible: stopped after the CPU half. Report: ${report_dir}/report.md"
  [ "${cpu_only}" = 1 ] && exit 0
  exit 2
fi

log "The main job on CUDA"
main_out="${report_dir}/main_job"
rm -rf "${main_out}"
main_start=$(date +%s)
main_status=0
fmnist="${prefix}/usr/share/datasets/fashion-mnist"
main_data=(--set "data.root=${fmnist}")
main_label="real Fashion-MNIST"
if [ ! -d "${fmnist}" ]; then
  main_data=(--set data.synthetic_fallback=true)
  main_label="SYNTHETIC data (the dataset-fashion-mnist .deb was not in .gpu-debs/)"
fi
"${build}/mlo" run configs/reweight_lt_fmnist.yaml --device cuda --no-progress --out "${main_out}" \
  "${main_data[@]}" ${main_set[@]+"${main_set[@]}"} > "${report_dir}/main_job.log" 2>&1 ||
  main_status=$?
main_seconds=$(( $(date +%s) - main_start ))

log "The forward-mode routes on CUDA (bench/forward_mode)"
bench_status=0
"${build}/bench/forward_mode" configs/reweight_lt_fmnist.yaml --rounds 5 --steps 10 \
  --set device=cuda --set threads=0 "${main_data[@]}" > "${report_dir}/forward_mode.log" 2>&1 ||
  bench_status=$?

# mlo against Betty on CUDA, when its wheel came along (PYTHON has torch; Betty is pure Python).
peers_status=0
peers_ran=0
betty_wheel="$(find "${debs}/wheels" -name 'betty_ml-*.whl' 2>/dev/null | head -1 || true)"
if [ -n "${betty_wheel}" ]; then
  peers_ran=1
  log "mlo against Betty on CUDA (bench/peers/compare.py)"
  { "${python}" -m pip install --quiet --no-deps --ignore-requires-python \
      --target "${prefix}/python" "${betty_wheel}" &&
    PYTHONPATH="${prefix}/python${PYTHONPATH:+:${PYTHONPATH}}" "${python}" bench/peers/compare.py \
      --device cuda --mlo-build "${build}" --rounds 3 --mlo-set "${main_data[1]}"; } > "${report_dir}/peers.log" 2>&1 ||
    peers_status=$?
fi

# Every row of one GPU (--ranks 0: the two-rank rows need a GPU per rank), ReLU and Swish.
ablate_status=0
rm -f "${report_dir}"/ablate_*.status
# The ablations' names: relu and swish, or relu_run1, relu_run2, ... with MLO_ABLATE_RUNS > 1.
ablations=()
variants=(relu swish)
[ "${no_ablate}" = 1 ] && variants=()
for variant in ${variants[@]+"${variants[@]}"}; do
  if [ "${ablate_runs}" = 1 ]; then
    ablations+=("${variant}")
  else
    for k in $(seq 1 "${ablate_runs}"); do ablations+=("${variant}_run${k}"); done
  fi
done
for name in ${ablations[@]+"${ablations[@]}"}; do
  config=configs/ablation/lt_cifar10_resnet50.yaml
  [ "${name%%_*}" = swish ] && config=configs/ablation/lt_cifar10_resnet50_swish.yaml
  log "mlo ablate on CUDA, batch 100, ${config} (${name})"
  # An earlier check's table in a reused report folder must not pass for this one's.
  rm -rf "${report_dir}/ablation_${name}"
  "${build}/mlo" ablate "${config}" --device cuda --ranks 0 --set data.batch_size=100 \
    --out "${report_dir}/ablation_${name}" > "${report_dir}/ablate_${name}.log" 2>&1 ||
    { status=$?; ablate_status=${status}; echo "${status}" > "${report_dir}/ablate_${name}.status"; }
done

{
  echo
  echo "## The main job on CUDA (configs/reweight_lt_fmnist.yaml)"
  echo
  if [ "${main_status}" = 0 ]; then
    echo "${main_seconds} s in all, on ${main_label}."
    echo '```'
    grep -E "device:|final test|balanced|rarest" "${report_dir}/main_job.log" | tail -8
    echo '```'
  else
    echo "FAILED (exit ${main_status}); the end of main_job.log:"
    echo '```'
    tail -15 "${report_dir}/main_job.log"
    echo '```'
  fi
  echo
  echo "## The forward-mode routes on CUDA (bench/forward_mode, main job's data and model)"
  echo
  echo '```'
  if [ "${bench_status}" = 0 ]; then
    grep -E "^(darts|cg|neumann):" "${report_dir}/forward_mode.log"
  else
    echo "FAILED (exit ${bench_status}); the end of forward_mode.log:"
    tail -15 "${report_dir}/forward_mode.log"
  fi
  echo '```'
  echo
  echo "## mlo against Betty 0.2.1 on CUDA (bench/peers/compare.py --rounds 3)"
  echo
  echo '```'
  if [ "${peers_ran}" = 0 ]; then
    echo "not run: no Betty wheel in ${debs#"${root}/"}/wheels (scripts/gpu_check.sh --prepare)"
  elif [ "${peers_status}" = 0 ]; then
    grep -E "^[a-z_0-9]+: mlo" "${report_dir}/peers.log"
  else
    echo "FAILED (exit ${peers_status}); the end of peers.log:"
    tail -15 "${report_dir}/peers.log"
  fi
  echo '```'
  echo
  [ "${no_ablate}" = 1 ] && echo "(the ablation was not run: --no-ablate)"
  for name in ${ablations[@]+"${ablations[@]}"}; do
    echo "## mlo ablate on CUDA, batch 100, ${name} (peak and reserved MiB, time ratios)"
    echo
    if [ -f "${report_dir}/ablation_${name}/ablation.md" ]; then
      sed -n '1,/^Peak:/p' "${report_dir}/ablation_${name}/ablation.md" | grep -v '^Peak:'
    else
      echo "FAILED (exit $(cat "${report_dir}/ablate_${name}.status" 2>/dev/null || echo "?"));" \
        "the end of ablate_${name}.log:"
      echo '```'
      tail -15 "${report_dir}/ablate_${name}.log"
      echo '```'
    fi
    echo
  done
  echo
  echo "$(( $(date +%s) - started )) s for the whole check."
} >> "${report_dir}/report.md"

log "Report: ${report_dir}/report.md"
cat "${report_dir}/report.md"
[ "${tests_status}" = 0 ] && [ "${cuda_status}" = 0 ] && [ "${main_status}" = 0 ] &&
  [ "${bench_status}" = 0 ] && [ "${peers_status}" = 0 ] && [ "${ablate_status}" = 0 ]
