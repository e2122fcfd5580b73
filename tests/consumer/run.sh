#!/usr/bin/env bash
# External-consumer check, run by CTest (see tests/consumer/CMakeLists.txt):
#   1. `cmake --install` the already-built mlo into a scratch prefix;
#   2. configure tests/consumer/project (find_package(mlo) only) against that prefix;
#   3. build it and install its quickstart; 4. run the installed quickstart;
#   5. build examples/custom_experiment (a user's own experiment with the `mlo` command line, its
#      own CMake project) against the same prefix, and run it from its YAML: a run, a run stopped
#      and resumed (bit for bit the same results), and a bad key refused with its line.
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

custom_build="${work_dir}/custom-build"
custom_runs="${work_dir}/custom-runs"

rm -rf "${prefix}" "${consumer_build}" "${consumer_prefix}" "${custom_build}" "${custom_runs}"
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
# nlohmann_json (JSON output) is private too.
if grep -rlE '#include *[<"]nlohmann/' "${prefix}/include" >/dev/null 2>&1; then
  grep -rlE '#include *[<"]nlohmann/' "${prefix}/include" >&2
  fail "installed headers include nlohmann/json, a private dependency of mlo"
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

# Both projects build at once: each is one or two translation units compiled without the
# precompiled header, so one alone leaves a core idle.
custom_args=(-S "${source_dir}/examples/custom_experiment" -B "${custom_build}"
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="${prefix}")
[ -n "${cxx}" ] && custom_args+=(-DCMAKE_CXX_COMPILER="${cxx}")
[ -n "${generator}" ] && custom_args+=(-G "${generator}")
[ -n "${torch_dir}" ] && custom_args+=(-DTorch_DIR="${torch_dir}")
step "configuring examples/custom_experiment"
cmake "${custom_args[@]}" || fail "configuring examples/custom_experiment"
step "building examples/custom_experiment and the quickstart"
cmake --build "${custom_build}" -j "$(nproc)" >"${custom_build}/build.log" 2>&1 &
custom_pid=$!
cmake --build "${consumer_build}" -j "$(nproc)" || fail "building the quickstart"
cmake --install "${consumer_build}" || fail "installing the quickstart"

quickstart="${consumer_prefix}/bin/quickstart"
[ -x "${quickstart}" ] || fail "no ${quickstart}"
# The installed program must load the installed core library, found through its RPATH, and
# nothing of the run layer (it links mlo::core only).
if command -v ldd >/dev/null 2>&1; then
  libmlo="$(ldd "${quickstart}" | awk '/libmlo_core\.so/ {print $3}')"
  case "$(readlink -f "${libmlo:-/nonexistent}")" in
    "$(cd "${prefix}" && pwd -P)"/*) echo "consumer: quickstart loads ${libmlo}" ;;
    *) fail "installed quickstart loads libmlo_core from '${libmlo}', expected ${prefix}" ;;
  esac
  if ldd "${quickstart}" | grep -q 'libmlo_run\.so'; then
    fail "the quickstart links mlo::core only, yet loads libmlo_run"
  fi
fi

step "running ${quickstart}"
quickstart_run="${work_dir}/quickstart-run"
rm -rf "${quickstart_run}"
"${quickstart}" "${quickstart_run}" --no-progress ||
  fail "the installed quickstart exited with $?"
for file in config.yaml log.txt metrics.csv metrics.jsonl results.json state.pt \
  tb/events.out.tfevents.mlo; do
  [ -s "${quickstart_run}/${file}" ] || fail "the quickstart's run left no ${file}"
done

# ---- A user's own experiment, launched from YAML through mlo::cli::main. ----
wait "${custom_pid}" || fail "building examples/custom_experiment (${custom_build}/build.log):
$(tail -n 40 "${custom_build}/build.log")"
custom="$(find "${custom_build}" -maxdepth 2 -type f -name custom_experiment -perm -u+x -print -quit)"
[ -n "${custom}" ] || fail "no custom_experiment executable under ${custom_build}"
yaml="${source_dir}/examples/custom_experiment/distill.yaml"

step "its experiments: its own and the library's"
names="$("${custom}" experiments)" || fail "custom_experiment experiments"
echo "${names}"
for name in distill hpo reweighting; do
  grep -qx "${name}" <<<"${names}" || fail "'${name}' is not among the registered experiments"
done

step "running the user's experiment from YAML"
"${custom}" run "${yaml}" --out "${custom_runs}/full" --no-progress --set engine.train_iters=200 ||
  fail "custom_experiment run exited with $?"
for file in config.yaml log.txt metrics.csv metrics.jsonl results.json state.pt; do
  [ -s "${custom_runs}/full/${file}" ] || fail "the run left no ${file}"
done
grep -q '"experiment":"distill"' "${custom_runs}/full/results.json" ||
  fail "results.json does not name the distill experiment: $(cat "${custom_runs}/full/results.json")"
grep -q 'valid/teacher_mse' "${custom_runs}/full/metrics.csv" ||
  fail "metrics.csv has no validation rows of the experiment's metrics"
grep -q '^top:' "${custom_runs}/full/config.yaml" ||
  fail "the resolved config.yaml lacks the experiment's own section"
cat "${custom_runs}/full/results.json"

step "stopping at step 120 and resuming"
"${custom}" run "${yaml}" --out "${custom_runs}/part" --no-progress --set engine.train_iters=200 \
  --stop-at 120 || fail "the stopped run exited with $?"
[ ! -e "${custom_runs}/part/results.json" ] || fail "a stopped run must not write results.json"
"${custom}" run "${yaml}" --out "${custom_runs}/part" --no-progress --set engine.train_iters=200 \
  --resume || fail "the resumed run exited with $?"
# (the results, not "meta": the metadata of the process that wrote them)
python3 - "${custom_runs}/full/results.json" "${custom_runs}/part/results.json" <<'PY' ||
import json, sys
full, part = (json.load(open(path)) for path in sys.argv[1:])
for results in (full, part):
    results.pop("meta")
sys.exit(full != part)
PY
  fail "stopped + resumed results differ from the uninterrupted run"
cmp "${custom_runs}/full/metrics.csv" "${custom_runs}/part/metrics.csv" ||
  fail "stopped + resumed metrics.csv differs from the uninterrupted run"

step "the program's own model, with its own keys, in a ready-made experiment"
cat >"${work_dir}/mlp.yaml" <<'YAML'
experiment: reweighting
name: mlp
seed: 1
threads: 1
engine: {train_iters: 3, valid_step: 0, log_step: 1, save_step: 0}
data: {dataset: synthetic, synthetic_size: 40, synthetic_test_size: 3, imbalance: 10,
       meta_size: 20, valid_size: 0, batch_size: 8, meta_batch_size: 10}
problems:
  classifier:
    model: {name: mlp, hidden: 16, layers: 2}
    optimizer: {name: sgd, lr: 0.05}
  reweighter:
    model: {name: mwn, hidden: 4}
    optimizer: {name: adam, lr: 0.01}
YAML
"${custom}" run "${work_dir}/mlp.yaml" --out "${custom_runs}/mlp" --no-progress ||
  fail "the run with the program's mlp model exited with $?"
grep -q 'layers: 2' "${custom_runs}/mlp/config.yaml" ||
  fail "the resolved config lacks the model's own keys: $(cat "${custom_runs}/mlp/config.yaml")"
set +e
message="$("${custom}" run "${work_dir}/mlp.yaml" --out "${custom_runs}/mlp_bad" \
  --set problems.classifier.model.layers=0 2>&1)"
status=$?
set -e
[ "${status}" -eq 2 ] && grep -q 'problems.classifier.model.layers: must be >= 1, got 0' \
  <<<"${message}" || fail "a bad key of the program's model: status ${status}, ${message}"

step "a bad key of the experiment's own section"
set +e
message="$("${custom}" run "${yaml}" --out "${custom_runs}/bad" --set data.features=0 2>&1)"
status=$?
set -e
echo "${message}"
[ "${status}" -eq 2 ] || fail "a bad key must exit with status 2, got ${status}"
grep -q 'data.features: must be >= 1, got 0' <<<"${message}" ||
  fail "the error does not name data.features"

echo "consumer: OK (find_package(mlo), build, install and run; a user's experiment from YAML)"
