// Cost of one reweighting meta-iteration against one baseline step, on the main job's data and
// model: both experiments are built from their YAML files (default configs/reweight_lt_fmnist.yaml
// and configs/baseline_lt_fmnist.yaml) and stepped alternately in the same process, so other
// load on the machine disturbs both alike. Prints the median milliseconds per global step of each
// and, last, reweight_over_baseline=<median ratio over rounds>.
//   build/bench/reweight_step [REWEIGHT_YAML] [BASELINE_YAML] [--rounds R] [--steps K]
//                             [--set key=value]...   (applied to both)
#include <mlo/run/yaml.h>
#include <mlo/mlo.h>
#include <mlo/run/experiment.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Milliseconds per global step over `steps` steps.
double time_steps(mlo::Engine& engine, int64_t steps) {
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) engine.step();
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(steps);
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::string> paths,
      overrides{"engine.valid_step=0", "engine.train_iters=100000", "threads=1"};
  int64_t rounds = 5, steps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoll(argv[++i]);
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoll(argv[++i]);
    } else if (arg == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.size() < 1) paths.push_back("configs/reweight_lt_fmnist.yaml");
  if (paths.size() < 2) paths.push_back("configs/baseline_lt_fmnist.yaml");
  try {
    auto reweight = mlo::run::make_experiment(mlo::run::load_run_config(paths[0], overrides));
    auto baseline = mlo::run::make_experiment(mlo::run::load_run_config(paths[1], overrides));
    mlo::Engine& rw = reweight->engine();
    mlo::Engine& base = baseline->engine();
    rw.initialize();
    base.initialize();
    time_steps(base, 3);  // warm-up (allocator, oneDNN primitives)
    time_steps(rw, 3);
    std::vector<double> base_ms, rw_ms, ratios;
    for (int64_t r = 0; r < rounds; ++r) {
      const double b = time_steps(base, steps);
      const double w = time_steps(rw, steps);
      base_ms.push_back(b);
      rw_ms.push_back(w);
      ratios.push_back(w / b);
      std::printf("round %lld: baseline %.2f ms/step, reweighting %.2f ms/step, ratio %.3f\n",
                  static_cast<long long>(r), b, w, w / b);
    }
    std::printf("baseline_ms_per_step=%.2f\n", median(base_ms));
    std::printf("reweight_ms_per_step=%.2f\n", median(rw_ms));
    std::printf("reweight_over_baseline=%.3f\n", median(ratios));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reweight_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
