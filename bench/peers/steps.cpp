// mlo's side of a side-by-side run with a peer library (bench/peers/compare.py): builds the
// experiment a YAML describes, takes W warm-up global steps, then times N more, and prints one
// line: "ms_per_step=<milliseconds per timed step> steps=<N>". Setup (data, the experiment's
// baselines) is not timed. The caller measures the process's peak memory, the same way for both
// libraries.
//   build/bench/peers_steps YAML [--warmup W] [--steps N] [--set key=value]...
#include <mlo/mlo.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  std::string path;
  std::vector<std::string> overrides{"engine.valid_step=0", "engine.save_step=0"};
  int64_t warmup = 100, steps = 500;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--warmup" && i + 1 < argc) {
      warmup = std::atoll(argv[++i]);
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoll(argv[++i]);
    } else if (arg == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (path.empty() && arg.rfind("--", 0) != 0) {
      path = arg;
    } else {
      std::fprintf(stderr, "peers_steps: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (path.empty() || warmup < 0 || steps < 1) {
    std::fprintf(stderr,
                 "usage: peers_steps YAML [--warmup W>=0] [--steps N>=1] [--set key=value]...\n");
    return 2;
  }
  // (an experiment may train a baseline for train_iters first: as long as the timing needs)
  overrides.push_back("engine.train_iters=" + std::to_string(warmup + steps));
  try {
    auto experiment = mlo::run::make_experiment(mlo::run::load_run_config(path, overrides));
    mlo::Engine& engine = experiment->engine();
    engine.initialize();
    // (on CUDA the clock reads after the queued work is done, as Betty's side does)
    auto synchronize = [] {
      if (torch::cuda::is_available()) torch::cuda::synchronize();
    };
    for (int64_t i = 0; i < warmup; ++i) engine.step();
    synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < steps; ++i) engine.step();
    synchronize();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    std::printf("ms_per_step=%.4f steps=%lld\n", elapsed.count() / static_cast<double>(steps),
                static_cast<long long>(steps));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peers_steps: %s\n", e.what());
    return 1;
  }
  return 0;
}
