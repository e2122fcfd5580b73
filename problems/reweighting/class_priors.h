#pragma once
/// \file
/// The two standard long-tail baselines that need no weight net, computed from the training
/// set's class counts n_c:
///
/// - class-balanced cross-entropy (Y. Cui, M. Jia, T.-Y. Lin, Y. Song, S. Belongie,
///   "Class-Balanced Loss Based on Effective Number of Samples", CVPR 2019): sample i weighs
///   c_{y_i}, with c_c proportional to 1 / E(n_c), E(n) = (1 - beta^n) / (1 - beta) the
///   "effective number" of n samples; beta -> 1 gives E(n) = n, inverse class frequency;
/// - logit adjustment (A. K. Menon, S. Jayasumana, A. S. Rawat, H. Jain, A. Veit, S. Kumar,
///   "Long-tail learning via logit adjustment", ICLR 2021), its loss form: the training loss is
///   CE(f(x) + tau log pi, y), pi_c = n_c / sum n, and prediction uses f(x) alone.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {

/// Class weights [C] (float64) for training counts `counts`, scaled to sum to C:
/// c_c = C (1 / E(n_c)) / sum_k (1 / E(n_k)). `beta` in [0, 1]; 1 means inverse class frequency
/// (E(n) = n), 0 means every class weighs 1. Throws `mlo::Error` for no classes, a class with
/// no sample or beta outside [0, 1].
at::Tensor class_balanced_weights(const std::vector<int64_t>& counts, double beta);

/// log pi_c = log(n_c / sum_k n_k) [C] (float64). Throws `mlo::Error` for no classes or a class
/// with no sample.
at::Tensor log_class_prior(const std::vector<int64_t>& counts);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
