#pragma once
// A weighting scheme defined outside libmlo: self-paced learning (Kumar, Packer and Koller,
// "Self-Paced Learning for Latent Variable Models", NeurIPS 2010) with hard weights and the pace
// given as a fraction of each batch: a step trains on the fraction f_t of its samples with the
// smallest losses, and f_t grows linearly to 1, so training starts on the easy samples and takes
// in the hard ones later:
//
//   f_t = min(1, start + (1 - start) t / ramp_steps)      (t = 0 in the classifier's first step)
//   v_i = 1 for the ceil(f_t N) smallest l_i, else 0;     loss = sum_i v_i l_i / sum_i v_i
//
// (A fixed loss threshold instead of a fraction lets a classifier that settles on the largest
// class keep only that class's samples for good.) Registered by name, so the reweighting
// experiment selects it in YAML (`reweighting: {method: self_paced, self_paced: {start: 0.8,
// ramp_steps: 200}}`). The weighting (`SelfPacedWeighting`) is the classifier's loss; the scheme
// (`SelfPacedScheme`) reads its keys and sets the weighting on the classifier.

#include "problems/reweighting/losses.h"
#include "problems/reweighting/reweighting.h"
#include "problems/reweighting/scheme.h"

#include <mlo/base/error.h>
#include <mlo/base/number_text.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

namespace self_paced {

namespace rw = mlo::problems::reweighting;

/// The classifier's loss: the mean of the step's easiest fraction of the batch.
struct SelfPacedWeighting : rw::Weighting {
  double start = 0.8;        // the first step's fraction, in (0, 1]
  int64_t ramp_steps = 200;  // steps until every sample counts; >= 0 (0: from the first)

  void check(const rw::Classifier& c) const override {
    MLO_CHECK(start > 0 && start <= 1 && ramp_steps >= 0, "problem '", c.name(),
              "': self-paced learning needs start in (0, 1] and ramp_steps >= 0, got ", start,
              " and ", ramp_steps);
  }
  /// The fraction of a batch the step after `step` earlier ones trains on.
  double fraction(int64_t step) const {
    if (ramp_steps == 0) return 1.0;
    return std::min(
        1.0, start + (1 - start) * static_cast<double>(step) / static_cast<double>(ramp_steps));
  }
  at::Tensor loss(rw::Classifier& c, const mlo::Batch& batch) const override {
    const at::Tensor out = c.logits(batch.data);
    const at::Tensor losses = rw::per_sample_cross_entropy(out, batch.target);
    c.log_metric("acc", rw::accuracy(out.detach(), batch.target));
    // (step_count() is 1 in the first step; 0 outside the engine)
    const double f = fraction(std::max<int64_t>(0, c.step_count() - 1));
    const int64_t n = losses.size(0);
    MLO_CHECK(n > 0, "problem '", c.name(), "': self-paced learning got an empty batch");
    const int64_t kept = std::max<int64_t>(
        1,
        std::min<int64_t>(n, static_cast<int64_t>(std::ceil(f * static_cast<double>(n) - 1e-9))));
    const at::Tensor easiest =
        std::get<1>(losses.detach().topk(kept, /*dim=*/0, /*largest=*/false));
    const at::Tensor v = torch::zeros_like(losses).index_fill_(0, easiest, 1.0);
    c.record_weights(v, batch.target);
    c.log_metric("spl_fraction", f);
    return (v * losses).sum() / static_cast<double>(kept);
  }
};

/// `reweighting.method: self_paced`: its keys, and the weighting it sets.
struct SelfPacedScheme : rw::SchemeFor<SelfPacedScheme> {
  static constexpr const char* kName = "self_paced";
  double start = 0.8;
  int64_t ramp_steps = 200;

  void visit(mlo::Fields& f) override {
    f("start", start, [](const double& x) {
      return x > 0 && x <= 1 ? std::string() : "must be in (0, 1], got " + mlo::number_text(x);
    });
    f("ramp_steps", ramp_steps, mlo::at_least(0));
  }
  rw::WeightNet weight_net() const override { return rw::WeightNet::kNone; }
  std::string describe() const override {
    return "self-paced learning (from " + mlo::number_text(start) +
           " of each batch to all of it in " + std::to_string(ramp_steps) + " steps)";
  }
  void apply(const rw::SchemeContext& c) const override {
    SelfPacedWeighting weighting;
    weighting.start = start;
    weighting.ramp_steps = ramp_steps;
    c.classifier.weighting(weighting);
  }
};

MLO_REGISTER_WEIGHTING(SelfPacedScheme);

}  // namespace self_paced
