#include "problems/reweighting/class_priors.h"

#include <mlo/base/error.h>

#include <torch/torch.h>

#include <cmath>
#include <string>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

void check_counts(const std::vector<int64_t>& counts, const char* what) {
  MLO_CHECK(!counts.empty(), what, ": no classes");
  for (size_t c = 0; c < counts.size(); ++c) {
    MLO_CHECK(counts[c] > 0, what, ": class ", c, " has ", counts[c],
              " training samples (every class needs at least one)");
  }
}

}  // namespace

at::Tensor class_balanced_weights(const std::vector<int64_t>& counts, double beta) {
  check_counts(counts, "class-balanced weights");
  MLO_CHECK(beta >= 0 && beta <= 1, "class-balanced weights: beta must be in [0, 1], got ", beta);
  std::vector<double> inverse(counts.size());
  double total = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    const auto n = static_cast<double>(counts[c]);
    // E(n) = (1 - beta^n) / (1 - beta); -expm1(n log beta) keeps 1 - beta^n exact for beta near 1.
    const double effective = beta >= 1 ? n
                             : beta <= 0 ? 1.0
                                         : -std::expm1(n * std::log(beta)) / (1 - beta);
    inverse[c] = 1.0 / effective;
    total += inverse[c];
  }
  const auto classes = static_cast<double>(counts.size());
  for (double& w : inverse) w *= classes / total;
  return torch::tensor(inverse, torch::kDouble);
}

at::Tensor log_class_prior(const std::vector<int64_t>& counts) {
  check_counts(counts, "class prior");
  double total = 0;
  for (int64_t n : counts) total += static_cast<double>(n);
  std::vector<double> log_prior;
  for (int64_t n : counts) log_prior.push_back(std::log(static_cast<double>(n) / total));
  return torch::tensor(log_prior, torch::kDouble);
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
