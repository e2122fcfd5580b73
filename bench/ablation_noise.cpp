// The noise floor of `mlo ablate`'s time ratios on this machine: one row of an ablation
// configuration (its baseline) built as several identical copies, all alive, timed in the
// ablation's own interleaved rounds (src/run/ablation_timing.cpp), one meta-iteration per copy
// per round (as `mlo ablate` does wherever a meta-iteration takes longer than --round-seconds).
// The copies compute the same thing, so on a quiet machine every ratio between them is 1.00;
// what they print instead is how far two rows of equal cost can differ here. Prints each copy's
// per-round wall times and their median, the standard deviation of one meta-iteration within a
// copy and of the copies' means (with what the former alone would give the latter: a larger
// figure means copies keep paces of their own), and, last,
//   spread=<largest / smallest copy median>
//   build/bench/ablation_noise CONFIG.yaml [--copies N] [--rounds R] [--set key=value]...
// Progress goes to stderr; the experiments' log lines and the figures to stdout.
#include <mlo/run/ablation.h>

#include "run/ablation_detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// The sample variance (n - 1 in the denominator); 0 for fewer than two values.
double variance(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double sum = 0;
  for (double x : v) sum += (x - m) * (x - m);
  return sum / static_cast<double>(v.size() - 1);
}

int usage(const char* program, const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s CONFIG.yaml [--copies N (2..32, default 4)] "
               "[--rounds R (1..100, default 3)] [--set key=value]...\n",
               program, why.c_str(), program);
  return 2;
}

// An integer in [low, high] from the whole of `text`, or -1.
int parse_count(const std::string& text, int low, int high) {
  std::size_t used = 0;
  int value = -1;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    return -1;
  }
  return used == text.size() && value >= low && value <= high ? value : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(argv[0], "no configuration file");
  const std::string config = argv[1];
  int copies = 4, rounds = 3;
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg != "--copies" && arg != "--rounds" && arg != "--set")
      return usage(argv[0], "unknown argument '" + arg + "'");
    if (i + 1 >= argc) return usage(argv[0], arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--set") {
      overrides.push_back(value);
      continue;
    }
    const bool copies_arg = arg == "--copies";
    const int n = parse_count(value, copies_arg ? 2 : 1, copies_arg ? 32 : 100);
    if (n < 0) return usage(argv[0], arg + " out of range or not a whole number: '" + value + "'");
    (copies_arg ? copies : rounds) = n;
  }
  std::vector<std::string> names;
  for (int k = 0; k < copies; ++k) names.push_back("copy " + std::to_string(k + 1));
  try {
    const auto t = mlo::run::detail::time_interleaved(
        config, std::vector<std::vector<std::string>>(copies, overrides), names, "", rounds,
        std::vector<int64_t>(copies, 1),
        [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    std::vector<double> medians, means, within;
    for (int k = 0; k < copies; ++k) {
      if (!t.errors[k].empty()) {
        // One copy more alive than memory allows, say: the figures would compare fewer copies.
        std::fprintf(stderr, "ablation_noise: %s left the rounds: %s\n", names[k].c_str(),
                     t.errors[k].c_str());
        return 1;
      }
      std::printf("%s: s", names[k].c_str());
      for (double s : t.seconds[k]) std::printf(" %.3f", s);
      medians.push_back(median(t.seconds[k]));
      means.push_back(mean(t.seconds[k]));
      within.push_back(variance(t.seconds[k]));
      std::printf("; median %.3f\n", medians.back());
    }
    const double sd_within = std::sqrt(mean(within));
    std::printf(
        "sd of one meta-iteration within a copy: %.4f s (%.1f%%); sd of the copies' "
        "means: %.4f s (noise alone: %.4f s)\n",
        sd_within, 100 * sd_within / mean(means), std::sqrt(variance(means)),
        sd_within / std::sqrt(static_cast<double>(rounds)));
    std::printf("spread=%.3f\n", *std::max_element(medians.begin(), medians.end()) /
                                     *std::min_element(medians.begin(), medians.end()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ablation_noise: %s\n", e.what());
    return 1;
  }
  return 0;
}
