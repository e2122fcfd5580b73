// The noise floor of `mlo ablate`'s time ratios on this machine: one row of an ablation
// configuration (its baseline) built as several identical copies, all alive, timed in the
// ablation's own interleaved rounds (tools/ablate/ablation_timing.cpp), one meta-iteration per copy
// per round (as `mlo ablate` does wherever a meta-iteration takes longer than --round-seconds).
// The copies compute the same thing, so on a quiet machine every ratio between them is 1.00;
// what they print instead is how far two rows of equal cost can differ here. Prints each copy's
// per-round wall times, their median and its ratio to copy 1 as `mlo ablate` forms a time ratio
// (the median of the per-round ratios); the standard deviation of one meta-iteration with the
// copies' and the rounds' own means taken out (the noise a time ratio sees: a shift common to a
// round cancels in it), and that of the copies' means beside what that noise alone gives a mean
// of R rounds (a larger figure means copies keep paces of their own); and, last,
//   spread=<largest / smallest copy median>
//   build/bench/ablation_noise CONFIG.yaml [--copies N] [--rounds R] [--set key=value]...
// Progress goes to stderr; the experiments' log lines and the figures to stdout.
// ablation_detail.h names AblationOptions without declaring it: the public header first.
#include "ablate/ablation.h"

#include "ablate/ablation_detail.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

using mlo::run::detail::median;  // the rounds' own, so the copies' figures are formed alike

namespace {

int usage(const char* program, const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s CONFIG.yaml [--copies N (2..32, default 4)] "
               "[--rounds R (2..100, default 3)] [--set key=value]...\n",
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
    const int n = parse_count(value, 2, copies_arg ? 32 : 100);
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
    for (int k = 0; k < copies; ++k) {
      // One copy more alive than memory allows, say: the figures would compare fewer copies.
      if (t.errors[k].empty()) continue;
      std::fprintf(stderr, "ablation_noise: %s left the rounds: %s\n", names[k].c_str(),
                   t.errors[k].c_str());
      return 1;
    }
    // x[k][r]: copy k's time in round r; the copies' and the rounds' means, and the grand mean.
    const auto& x = t.seconds;
    std::vector<double> copy_mean(copies, 0.0), round_mean(rounds, 0.0), medians;
    double grand = 0;
    for (int k = 0; k < copies; ++k) {
      for (int r = 0; r < rounds; ++r) {
        copy_mean[k] += x[k][r] / rounds;
        round_mean[r] += x[k][r] / copies;
        grand += x[k][r] / (copies * rounds);
      }
    }
    for (int k = 0; k < copies; ++k) {
      std::vector<double> ratios;
      for (int r = 0; r < rounds; ++r) ratios.push_back(x[k][r] / x[0][r]);
      medians.push_back(median(x[k]));
      std::printf("%s: s", names[k].c_str());
      for (double s : x[k]) std::printf(" %.3f", s);
      std::printf("; median %.3f; ratio to copy 1 %.3f\n", medians.back(), median(ratios));
    }
    // The two-way residual: what is left of a time once its copy's and its round's means are
    // taken out.
    double residual = 0;
    for (int k = 0; k < copies; ++k) {
      for (int r = 0; r < rounds; ++r) {
        const double e = x[k][r] - copy_mean[k] - round_mean[r] + grand;
        residual += e * e;
      }
    }
    const double sd = std::sqrt(residual / ((copies - 1) * (rounds - 1)));
    double between = 0;
    for (double m : copy_mean) between += (m - grand) * (m - grand);
    std::printf(
        "sd of one meta-iteration (copies' and rounds' means out): %.4f s (%.1f%%); sd of "
        "the copies' means: %.4f s (that noise alone: %.4f s)\n",
        sd, 100 * sd / grand, std::sqrt(between / (copies - 1)),
        sd / std::sqrt(static_cast<double>(rounds)));
    std::printf("spread=%.3f\n", *std::max_element(medians.begin(), medians.end()) /
                                     *std::min_element(medians.begin(), medians.end()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ablation_noise: %s\n", e.what());
    return 1;
  }
  return 0;
}
