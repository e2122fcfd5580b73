#pragma once
// Test fixture: the logistic-regression HPO pair (problems/hpo) in double precision, small (200
// points, 5 features, 5 per-feature L2 weights at distinct values), with the lower optimizer a
// test chooses. For tests of methods that differentiate through inner steps.

#include "problems/hpo/logreg.h"

#include <torch/torch.h>

#include <functional>
#include <utility>

namespace mlo {
namespace testing {

/// The pair and its data.
struct DoubleLogReg {
  problems::hpo::LogRegData data;
  problems::hpo::LogRegHpo pair;
};

/// Builds the pair with the inner problem's `config`; `set_optimizer` gives the inner problem
/// its optimizer.
inline DoubleLogReg make_double_logreg(ProblemConfig config,
                                       const std::function<void(Problem&)>& set_optimizer) {
  namespace hpo = problems::hpo;
  DoubleLogReg r;
  hpo::LogRegData raw = hpo::make_logreg_data(200, 5, 0.5, /*seed=*/3);
  r.data.train = Batch(raw.train.data.to(torch::kDouble), raw.train.target.to(torch::kDouble));
  r.data.valid = Batch(raw.valid.data.to(torch::kDouble), raw.valid.target.to(torch::kDouble));
  r.pair =
      hpo::make_logreg_hpo(r.data, std::move(config), hpo::LogRegHpoOptions().initial_weight(0.3));
  r.pair.inner->module().to(torch::kDouble);
  r.pair.outer->module().to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    r.pair.outer->weights().copy_(torch::tensor({0.1, 0.5, 1.0, 0.2, 2.0}, torch::kDouble));
  }
  set_optimizer(*r.pair.inner);
  return r;
}

}  // namespace testing
}  // namespace mlo
