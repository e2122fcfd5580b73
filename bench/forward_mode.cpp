// The forward-mode routes against the reverse-mode ones on the main job (the reweighting
// experiment from its YAML, default configs/reweight_lt_fmnist.yaml): each pair below is built
// twice, identical but for the method's mode, and stepped alternately in the same process, so
// other load on the machine disturbs both alike. Memory: the exact meter's highest count of live
// tensor bytes during a global step (the meta step included; on CUDA the caching allocator's
// allocated bytes), the same measure for both.
//   darts   finite_difference vs jvp  (the class-aware weight net: the separable route)
//   cg      double_backward vs jvp    (5 steps; the main job's CNN)
//   neumann double_backward vs jvp
// And with the CIFAR ResNet-50 classifier (batch norm, which a Chain runs in elementary
// operations under forward-over-reverse) on synthetic CIFAR-shaped data, batch 32:
//   cg_resnet50, neumann_resnet50     (the same pairs, 5 steps)
// And on the HPO problem (configs/hpo_logreg.yaml: 20 per-feature L2 weights), the hypergradient
// of an unroll of K inner steps, for K = 10, 100, 1000:
//   hpo_K   unrolled vs forward       (each round K global steps: one unroll and its
//                                      hypergradient)
// Prints, per pair, each round's milliseconds per global step, then the median time ratio
// (forward mode / reference) with its range over the rounds and each side's peak MiB.
//   build/bench/forward_mode [YAML] [--rounds R] [--steps K]
//                            [--only darts|cg|neumann|cg_resnet50|neumann_resnet50|
//                                    hpo_10|hpo_100|hpo_1000]
//                            [--set key=value]...   (applied to every run of the main job)
#include <mlo/memory/meter.h>
#include <mlo/mlo.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Pair {
  std::string name;
  std::vector<std::string> common, reference, forward;
  std::string yaml;   // "" : the main job's
  int64_t steps = 0;  // per round; 0: --steps
};

// Milliseconds per global step over `steps` steps, and the highest live bytes during them.
struct Timed {
  double ms = 0;
  int64_t peak = 0;
};

Timed time_steps(mlo::Engine& engine, int64_t steps) {
  // (the device of the engine's problems: on CUDA the meter reads the caching allocator)
  const c10::Device device = engine.level(*engine.problems().front()).device();
  mlo::memory::MemoryMeter meter(device);
  std::optional<mlo::memory::MemoryMeter::Active> on;
  if (device.is_cpu()) on.emplace(meter);
  const int64_t before = meter.current();
  meter.reset_peak();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) engine.step();
  if (device.is_cuda()) torch::cuda::synchronize();
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  return {elapsed.count() / static_cast<double>(steps), meter.peak() - before};
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b,
                                const std::vector<std::string>& c) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  std::string path = "configs/reweight_lt_fmnist.yaml", only;
  std::vector<std::string> overrides{"engine.valid_step=0", "engine.train_iters=100000",
                                     "threads=1"};
  int64_t rounds = 5, steps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoll(argv[++i]);
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoll(argv[++i]);
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else {
      path = arg;
    }
  }
  const std::vector<std::string> cg = {"problems.classifier.method=cg",
                                       "problems.classifier.cg.iterations=5"};
  const std::vector<std::string> neumann = {"problems.classifier.method=neumann",
                                            "problems.classifier.neumann.iterations=5",
                                            "problems.classifier.neumann.alpha=0.05"};
  const std::vector<std::string> resnet50 = {
      "problems.classifier.model.name=resnet50", "data.dataset=synthetic",
      "data.synthetic_size=2000", "data.synthetic_test_size=100", "data.batch_size=32",
      "data.meta_batch_size=32"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<Pair> pairs = {
      {"darts", {"problems.classifier.method=darts"},
       {"problems.classifier.darts.mode=finite_difference"},
       {"problems.classifier.darts.mode=jvp"}, "", 0},
      {"cg", cg, {"problems.classifier.cg.mode=double_backward"},
       {"problems.classifier.cg.mode=jvp"}, "", 0},
      {"neumann", neumann, {"problems.classifier.neumann.mode=double_backward"},
       {"problems.classifier.neumann.mode=jvp"}, "", 0},
      {"cg_resnet50", with(cg, resnet50), {"problems.classifier.cg.mode=double_backward"},
       {"problems.classifier.cg.mode=jvp"}, "", 0},
      {"neumann_resnet50", with(neumann, resnet50),
       {"problems.classifier.neumann.mode=double_backward"},
       {"problems.classifier.neumann.mode=jvp"}, "", 0}};
  std::vector<Pair> all = pairs;
  for (const int64_t k : {10, 100, 1000}) {
    const std::string unroll = "problems.inner.unroll_steps=" + std::to_string(k);
    all.push_back({"hpo_" + std::to_string(k),
                   // (the experiment first trains its frozen-weights baseline for train_iters
                   // steps, untimed: as long as the rounds need)
                   {unroll, "engine.train_iters=" + std::to_string((rounds + 1) * k),
                    "engine.valid_step=0", "engine.save_step=0", "threads=1"},
                   {"problems.inner.method=unrolled"},
                   {"problems.inner.method=forward"},
                   "configs/hpo_logreg.yaml",
                   k});
  }
  try {
    for (const Pair& pair : all) {
      if (!only.empty() && only != pair.name) continue;
      const std::string& yaml = pair.yaml.empty() ? path : pair.yaml;
      const std::vector<std::string> base = pair.yaml.empty() ? overrides
                                                              : std::vector<std::string>{};
      const int64_t round_steps = pair.steps > 0 ? pair.steps : steps;
      auto reference = mlo::run::make_experiment(
          mlo::run::load_run_config(yaml, joined(base, pair.common, pair.reference)));
      auto forward = mlo::run::make_experiment(
          mlo::run::load_run_config(yaml, joined(base, pair.common, pair.forward)));
      mlo::Engine& ref = reference->engine();
      mlo::Engine& fwd = forward->engine();
      ref.initialize();
      fwd.initialize();
      // Warm-up (allocator, oneDNN primitives); on the HPO problem one unroll, so that every
      // round is one.
      const int64_t warmup = pair.steps > 0 ? pair.steps : 3;
      time_steps(ref, warmup);
      time_steps(fwd, warmup);
      std::vector<double> ratios;
      int64_t ref_peak = 0, fwd_peak = 0;
      std::vector<double> ref_ms, fwd_ms;
      for (int64_t r = 0; r < rounds; ++r) {
        // (alternating which goes first)
        Timed a, b;
        if (r % 2 == 0) {
          a = time_steps(ref, round_steps);
          b = time_steps(fwd, round_steps);
        } else {
          b = time_steps(fwd, round_steps);
          a = time_steps(ref, round_steps);
        }
        ref_ms.push_back(a.ms);
        fwd_ms.push_back(b.ms);
        ratios.push_back(b.ms / a.ms);
        ref_peak = std::max(ref_peak, a.peak);
        fwd_peak = std::max(fwd_peak, b.peak);
        std::printf("%s round %lld: reference %.2f ms/step, forward %.2f ms/step, ratio %.3f\n",
                    pair.name.c_str(), static_cast<long long>(r), a.ms, b.ms, b.ms / a.ms);
      }
      const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
      std::printf("%s: reference %.2f ms/step, forward %.2f ms/step, time ratio %.3f (%.3f-%.3f); "
                  "peak %.3f MiB vs %.3f MiB, memory ratio %.3f\n",
                  pair.name.c_str(), median(ref_ms), median(fwd_ms), median(ratios), *lo, *hi,
                  mlo::memory::to_mib(ref_peak), mlo::memory::to_mib(fwd_peak),
                  static_cast<double>(fwd_peak) / static_cast<double>(ref_peak));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forward_mode: %s\n", e.what());
    return 1;
  }
  return 0;
}
