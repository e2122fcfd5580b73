#pragma once
/// \file
/// The vector arithmetic and autograd products hypergradient methods are built from, public so
/// that a method written outside libmlo uses the same ones (examples/fixed_point_method).
///
/// A "vector" here is a list of tensors, one per parameter (`std::vector<at::Tensor>`); the
/// helpers treat the list as one flat vector. Results are detached unless stated otherwise.

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace mlo {
namespace hypergrad {
/// A list of tensors; in hypergradients, one per trainable parameter of a problem (a vector).
using TensorList = std::vector<at::Tensor>;

// ---- Vector arithmetic. ---------------------------------------------------------------------

/// Sum over all tensors of <a_i, b_i>, as a double.
inline double dot(const TensorList& a, const TensorList& b) {
  MLO_INTERNAL_ASSERT(a.size() == b.size(), "dot: ", a.size(), " vs ", b.size(), " tensors");
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    // NOTE: summed in double: a float32 vector under a large loss scale would overflow a
    // float32 sum of squares while every entry is finite.
    sum += (a[i] * b[i]).sum(at::kDouble).item<double>();
  }
  return sum;
}

/// Euclidean norm of the concatenation of all tensors.
inline double norm(const TensorList& a) { return std::sqrt(dot(a, a)); }

/// Zeros shaped (and typed, and placed) like each tensor of `a`.
inline TensorList zeros_like(const TensorList& a) {
  TensorList out;
  out.reserve(a.size());
  for (const auto& t : a) {
    out.push_back(at::zeros_like(t));
  }
  return out;
}

/// `v` with undefined entries (a parameter the upper loss does not use) replaced by zeros shaped
/// like the matching tensor of `like`; checks that the counts agree.
inline TensorList defined_or_zeros(const TensorList& v, const TensorList& like, const char* method,
                                   const std::string& problem) {
  MLO_CHECK(v.size() == like.size(), method, ": problem '", problem, "' has ", like.size(),
            " trainable parameters but the incoming vector has ", v.size(), " tensors");
  TensorList out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.push_back(v[i].defined() ? v[i].detach() : at::zeros_like(like[i]));
  }
  return out;
}

/// Detached copies (`clone`) of each tensor: storage that later in-place updates may change.
inline TensorList clone(const TensorList& a) {
  TensorList out;
  out.reserve(a.size());
  for (const auto& t : a) {
    out.push_back(t.detach().clone());
  }
  return out;
}

/// `y += alpha * x`, in place on `y`'s tensors.
inline void axpy(double alpha, const TensorList& x, TensorList& y) {
  MLO_INTERNAL_ASSERT(x.size() == y.size(), "axpy: ", x.size(), " vs ", y.size(), " tensors");
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i].add_(x[i], alpha);
  }
}

/// `x * alpha + y`, as new tensors.
inline TensorList add_scaled(const TensorList& y, double alpha, const TensorList& x) {
  MLO_INTERNAL_ASSERT(x.size() == y.size(), "add_scaled: ", x.size(), " vs ", y.size(), " tensors");
  TensorList out;
  out.reserve(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    out.push_back(y[i].detach().add(x[i].detach(), alpha));
  }
  return out;
}

/// `alpha * a`, as new tensors.
inline TensorList scale(const TensorList& a, double alpha) {
  TensorList out;
  out.reserve(a.size());
  for (const auto& t : a) {
    out.push_back(t.detach().mul(alpha));
  }
  return out;
}

/// `a` with every tensor negated, in place.
inline void negate_(TensorList& a) {
  for (auto& t : a) {
    t.neg_();
  }
}

// ---- Autograd. ------------------------------------------------------------------------------

/// Gradients of the scalar `loss` with respect to `inputs`, detached, zeros where `loss` does not
/// depend on an input. Frees the graph.
inline TensorList grad_or_zeros(const at::Tensor& loss, const TensorList& inputs) {
  if (inputs.empty()) {
    return {};
  }
  if (!loss.requires_grad()) {
    return zeros_like(inputs);
  }
  auto grads = torch::autograd::grad({loss}, inputs, /*grad_outputs=*/{},
                                     /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    grads[i] = grads[i].defined() ? grads[i].detach() : at::zeros_like(inputs[i]);
  }
  return grads;
}

/// The gradient of `curr.loss()` (the mean loss over its latest accumulation window)
/// with respect to `inputs`, taken one micro-batch at a time so that only one micro-batch's
/// graph is alive at once.
inline TensorList window_grad(Level& curr, const TensorList& inputs) {
  const std::size_t n = std::max<std::size_t>(1, curr.batches().size());
  TensorList total = grad_or_zeros(curr.loss(0), inputs);
  for (std::size_t i = 1; i < n; ++i) axpy(1.0, grad_or_zeros(curr.loss(i), inputs), total);
  return total;
}

/// Second-order access to a lower problem's loss L(w, lambda) at the current point:
/// g = dL/dw is computed once with a graph, then Hessian-vector products H u = d(g.u)/dw
/// and the final mixed product d(g.x)/dlambda reuse that graph. L is the mean over the lower
/// problem's latest accumulation window (all its micro-batches), so the graph holds them all:
/// the same memory as the equivalent large batch.
class LowerGradient {
 public:
  /// Evaluates `curr.loss()` and g = dL/dw over `curr.parameters()`.
  explicit LowerGradient(Level& curr) : curr_(&curr), params_(curr.parameters()) {
    const at::Tensor loss = curr.loss();
    MLO_CHECK(loss.defined() && loss.numel() == 1, "problem '", curr.name(),
              "': training_step must return a scalar loss for hypergradients");
    if (params_.empty() || !loss.requires_grad()) {
      return;
    }
    auto grads = torch::autograd::grad({loss}, params_, /*grad_outputs=*/{},
                                       /*retain_graph=*/true, /*create_graph=*/true,
                                       /*allow_unused=*/true);
    // NOTE: only the components of g that still depend on a parameter carry second-order
    // information; the others (unused w_i, or L linear in w_i) contribute zeros.
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined() && grads[i].requires_grad()) {
        outputs_.push_back(grads[i]);
        index_.push_back(i);
      }
    }
  }

  /// The lower problem's trainable parameters w.
  const TensorList& parameters() const { return params_; }

  /// H u (detached), one tensor per parameter; keeps the graph for further products. Under
  /// data parallelism H is the global batch's: the mean of the ranks' products.
  TensorList hvp(const TensorList& u) const {
    TensorList out = vjp(u, params_, /*retain_graph=*/true);
    curr_->mean(out);
    return out;
  }

  /// d(g . x)/dlambda (detached), zeros where g does not depend on an input. Frees the graph:
  /// call it last.
  TensorList mixed(const TensorList& x, const TensorList& lambda) {
    return vjp(x, lambda, /*retain_graph=*/false);
  }

 private:
  TensorList vjp(const TensorList& u, const TensorList& inputs, bool retain_graph) const {
    MLO_INTERNAL_ASSERT(u.size() == params_.size(), "vector has ", u.size(), " tensors, expected ",
                        params_.size());
    if (inputs.empty()) {
      return {};
    }
    if (outputs_.empty()) {
      return zeros_like(inputs);
    }
    TensorList grad_outputs;
    grad_outputs.reserve(index_.size());
    for (std::size_t i : index_) {
      grad_outputs.push_back(u[i].detach());
    }
    auto grads = torch::autograd::grad(outputs_, inputs, grad_outputs, retain_graph,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      grads[i] = grads[i].defined() ? grads[i].detach() : at::zeros_like(inputs[i]);
    }
    return grads;
  }

  Level* curr_;
  TensorList params_;
  TensorList outputs_;              // components of g that are part of a graph
  std::vector<std::size_t> index_;  // their positions in params_
};

}  // namespace hypergrad
}  // namespace mlo
