#pragma once
// Test fixture: a quadratic bilevel problem with a closed-form implicit hypergradient.
//
//   lower loss  L(w, lambda) = 1/2 w^T A w - w^T B lambda,   A (n x n) SPD, B (n x m)
//   H = A,   d^2 L / dlambda dw = -B^T,
//   exact implicit hypergradient of v:  -(d^2 L / dlambda dw) H^{-1} v = B^T A^{-1} v.
//
// A = Q diag(eigenvalues) Q^T with Q a seeded random orthogonal matrix and eigenvalues evenly
// spaced in [min_eigenvalue, max_eigenvalue]. Everything is double precision. Example:
//
//   auto q = mlo::testing::Quadratic::make(mlo::ProblemConfig().method(mlo::CGOptions()));
//   auto hg = q.lower->config().method().make();
//   auto out = hg->apply({q.v}, *q.lower_level, *q.upper_level);   // ~ q.exact()

#include "support/levels.h"

#include <mlo/core/problem.h>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mlo {
namespace testing {

/// A module holding named parameters with given initial values (no forward).
struct ParameterModule : torch::nn::Module {
  explicit ParameterModule(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
    for (const auto& [name, value] : params) {
      tensors.push_back(register_parameter(name, value.clone()));
    }
  }
  /// The parameters, in registration order.
  std::vector<torch::Tensor> tensors;
};

/// Upper level: holds lambda. Its own loss (unused by hypergradients) is 1/2 ||lambda||^2.
struct QuadraticUpper : mlo::Problem {
  using mlo::Problem::Problem;
  torch::Tensor lambda() const { return module_as<ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override { return 0.5 * lambda().dot(lambda()); }
};

/// Lower level: holds w; its loss reads lambda through a typed handle to the upper problem.
struct QuadraticLower : mlo::Problem {
  using mlo::Problem::Problem;
  QuadraticUpper* upper = nullptr;
  torch::Tensor a, b;
  torch::Tensor w() const { return module_as<ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override {
    const torch::Tensor x = w();
    return 0.5 * x.dot(a.mv(x)) - x.dot(b.mv(upper->lambda()));
  }
};

/// The quadratic bilevel pair plus the data of its closed form.
struct Quadratic {
  int64_t n = 5;
  int64_t m = 3;
  torch::Tensor a;      // n x n, SPD
  torch::Tensor a_inv;  // n x n
  torch::Tensor b;      // n x m
  torch::Tensor v;      // n, the incoming vector dL_upper/dw
  std::shared_ptr<QuadraticLower> lower;
  std::shared_ptr<QuadraticUpper> upper;
  /// The two problems as levels (what a method is applied to), in one process.
  std::shared_ptr<mlo::detail::LevelRuntime> lower_level;
  std::shared_ptr<mlo::detail::LevelRuntime> upper_level;

  /// B^T A^{-1} v: the exact implicit hypergradient of `vec`.
  torch::Tensor exact(const torch::Tensor& vec) const { return b.t().mv(a_inv.mv(vec)); }
  torch::Tensor exact() const { return exact(v); }

  /// Builds the pair. `unused_upper_parameter` adds a second upper parameter that the lower
  /// loss ignores (its hypergradient must be zeros).
  static Quadratic make(const mlo::ProblemConfig& lower_config, uint64_t seed = 0, int64_t n = 5,
                        int64_t m = 3, double min_eigenvalue = 0.5, double max_eigenvalue = 2.0,
                        bool unused_upper_parameter = false) {
    torch::manual_seed(seed);
    const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    Quadratic q;
    q.n = n;
    q.m = m;
    const torch::Tensor q_mat = std::get<0>(torch::linalg_qr(torch::randn({n, n}, opts)));
    const torch::Tensor eig = torch::linspace(min_eigenvalue, max_eigenvalue, n, opts);
    q.a = q_mat.mm(torch::diag(eig)).mm(q_mat.t());
    q.a = 0.5 * (q.a + q.a.t());  // exactly symmetric
    q.a_inv = q_mat.mm(torch::diag(1.0 / eig)).mm(q_mat.t());
    q.b = torch::randn({n, m}, opts);
    q.v = torch::randn({n}, opts);

    std::vector<std::pair<std::string, torch::Tensor>> upper_params{
        {"lambda", torch::randn({m}, opts)}};
    if (unused_upper_parameter) {
      upper_params.emplace_back("unused", torch::randn({2, 2}, opts));
    }
    q.upper = std::make_shared<QuadraticUpper>("upper");
    q.upper->module(std::make_shared<ParameterModule>(upper_params));

    q.lower = std::make_shared<QuadraticLower>("lower", lower_config);
    q.lower->module(std::make_shared<ParameterModule>(
        std::vector<std::pair<std::string, torch::Tensor>>{{"w", torch::randn({n}, opts)}}));
    q.lower->upper = q.upper.get();
    q.lower->a = q.a;
    q.lower->b = q.b;
    q.upper_level = make_level(*q.upper);
    q.lower_level = make_level(*q.lower);
    return q;
  }
};

/// ||a - b|| / ||b|| over flattened tensors.
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

}  // namespace testing
}  // namespace mlo
