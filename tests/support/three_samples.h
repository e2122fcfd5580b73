#pragma once
// Three samples of two features and two classes, and the identity linear model on them (logits =
// features), in float64: closed forms of the classifier's losses are then written by hand.

#include <mlo/core/batch.h>
#include <mlo/nn/chain.h>
#include <torch/torch.h>

namespace mlo_test {

// x = (1, 0), (0, 0), (0, 2); y = 0, 1, 0.
inline mlo::Batch three_samples() {
  return mlo::Batch(torch::tensor({1.0, 0.0, 0.0, 0.0, 0.0, 2.0}, torch::kDouble).view({3, 2}),
                    torch::tensor({0, 1, 0}, torch::kLong));
}

// One Linear(2, 2) with identity weights and zero bias.
inline mlo::nn::Chain identity_chain() {
  mlo::nn::Chain chain;
  torch::nn::Linear fc(2, 2);
  {
    torch::NoGradGuard no_grad;
    fc->weight.copy_(torch::eye(2));
    fc->bias.zero_();
  }
  chain->push_back("fc", fc);
  chain->to(torch::kDouble);
  return chain;
}

}  // namespace mlo_test
