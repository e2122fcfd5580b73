#pragma once
// A one-level problem on an mlo::nn::Chain, for the ZeRO-3 tests (tests/core/engine_test.cpp,
// tests/cuda/zero3_test.cpp): y = chain(x) fitted to x's row sums by mean squared error.
#include <mlo/core/problem.h>
#include <mlo/nn/chain.h>

#include <torch/torch.h>

namespace mlo_test {

struct ChainFit : mlo::Problem {
  using mlo::Problem::Problem;
  torch::Tensor training_step(const mlo::Batch& b) override {
    return (module_as<mlo::nn::ChainImpl>()->forward(b.data).squeeze(1) - b.data.sum(1))
        .pow(2)
        .mean();
  }
};

}  // namespace mlo_test
