// The noise floor of `mlo ablate`'s time ratios on this machine: one row of an ablation
// configuration (its baseline) built as several identical copies, all alive, timed in the
// ablation's own interleaved rounds (src/run/ablation_timing.cpp). The copies compute the same
// thing, so on a quiet machine every ratio between them is 1.00; what they print instead is how
// far two rows of equal cost can differ here, in wall time and in process CPU time. Prints each
// copy's per-round times and median, and, last,
//   wall_spread=<largest/smallest copy median> cpu_spread=<the same for CPU time>
//   build/bench/ablation_noise CONFIG.yaml [--copies N] [--rounds R] [--set key=value]...
#include <mlo/run/ablation.h>

#include "run/ablation_detail.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double spread(const std::vector<double>& medians) {
  return *std::max_element(medians.begin(), medians.end()) /
         *std::min_element(medians.begin(), medians.end());
}

int usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s CONFIG.yaml [--copies N (2..32)] [--rounds R (1..100)] "
               "[--set key=value]...\n",
               program);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(argv[0]);
  const std::string config = argv[1];
  int copies = 4, rounds = 3;
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    if (arg == "--copies") {
      copies = std::atoi(argv[++i]);
    } else if (arg == "--rounds") {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--set") {
      overrides.push_back(argv[++i]);
    } else {
      return usage(argv[0]);
    }
  }
  if (copies < 2 || copies > 32 || rounds < 1 || rounds > 100) return usage(argv[0]);
  std::vector<std::string> names;
  for (int k = 0; k < copies; ++k) names.push_back("copy " + std::to_string(k + 1));
  try {
    const auto t = mlo::run::detail::time_interleaved(
        config, std::vector<std::vector<std::string>>(copies, overrides), names, "", rounds,
        std::vector<int64_t>(copies, 1),
        [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    std::vector<double> wall, cpu;
    for (int k = 0; k < copies; ++k) {
      std::printf("%s: wall s", names[k].c_str());
      for (double s : t.seconds[k]) std::printf(" %.3f", s);
      std::printf(", CPU s");
      for (double s : t.cpu_seconds[k]) std::printf(" %.3f", s);
      wall.push_back(median(t.seconds[k]));
      cpu.push_back(median(t.cpu_seconds[k]));
      std::printf("; medians %.3f wall, %.3f CPU\n", wall.back(), cpu.back());
    }
    std::printf("wall_spread=%.3f cpu_spread=%.3f\n", spread(wall), spread(cpu));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ablation_noise: %s\n", e.what());
    return 1;
  }
  return 0;
}
