#pragma once
/// \file
/// Label noise in the manner of the noisy-label benchmarks of Meta-Weight-Net (uniform and flip
/// noise): a seeded corruption of a training set's labels, with the realized rate and confusion
/// matrix. Unlike those benchmarks, which corrupt each label with probability `ratio` (uniform:
/// possibly into its own class; flip: into one other class drawn per class), here exactly
/// `round(ratio n_c)` labels of each class change, always to a wrong class, and flip is the
/// fixed pair flip c -> c + 1. Experiments apply it to the training split only, after the meta
/// and validation sets are taken, so that those stay clean.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlo {
namespace data {

/// How a corrupted label is chosen.
enum class LabelNoise {
  kNone,     ///< no corruption
  kUniform,  ///< a class drawn uniformly from the C - 1 other classes
  kFlip,     ///< the next class: c -> (c + 1) mod C (pair flip)
};

/// Parameters of `corrupt_labels`.
/// Example: `LabelNoiseOptions(LabelNoise::kUniform, 0.4, 10).seed(3)`.
struct LabelNoiseOptions {
  /// The three parameters without a default; `corrupt_labels` checks their values.
  LabelNoiseOptions(LabelNoise type, double ratio, int64_t num_classes)
      : type_(type), ratio_(ratio), num_classes_(num_classes) {}
  /// The kind of noise.
  TORCH_ARG(LabelNoise, type);
  /// The fraction of each class's labels made wrong, in [0, 1].
  TORCH_ARG(double, ratio);
  /// C: labels are 0 .. C-1 (C >= 2 for any noise).
  TORCH_ARG(int64_t, num_classes);
  /// Seeds which samples are corrupted and, for uniform noise, their new labels.
  TORCH_ARG(uint64_t, seed) = 0;
};

/// Result of `corrupt_labels`.
struct NoisyLabels {
  /// The labels after corruption (int64, same shape as the input).
  at::Tensor labels;
  /// `confusion[t][g]`: samples of true class t that were given label g (int64, [C, C]).
  at::Tensor confusion;
  /// Samples whose label was changed.
  int64_t corrupted = 0;
  /// Samples in all.
  int64_t total = 0;
  /// corrupted / total (0 for an empty set).
  double rate() const { return total > 0 ? static_cast<double>(corrupted) / total : 0.0; }
};

/// Corrupts `labels`: in every class c with n_c samples, round(ratio * n_c) of them, chosen by a
/// seeded shuffle, get a wrong label (uniform: any other class with equal probability; flip: the
/// next class). Every corrupted label differs from the true one, so the realized rate is the
/// ratio up to the rounding per class (ratio 0.4 of 6000 samples: exactly 2400). Same labels,
/// options and seed give the same result; `kNone` or ratio 0 returns the labels unchanged.
/// Throws `mlo::Error` for labels outside 0..C-1, a ratio outside [0, 1], or noise with C < 2.
NoisyLabels corrupt_labels(const at::Tensor& labels, const LabelNoiseOptions& options);

/// The confusion matrix as text, one line per true class: "<name>: <count given label 0> ...".
std::vector<std::string> confusion_lines(const at::Tensor& confusion,
                                         const std::vector<std::string>& class_names);

}  // namespace data
}  // namespace mlo
