#include <mlo/hypergrad/forward_mode.h>

#include <mlo/core/level.h>
#include <mlo/core/problem.h>
#include <mlo/core/stop_gradient.h>
#include <mlo/detail/torch_compat.h>

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/forward_grad.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace mlo {
namespace hypergrad {
namespace {

// LibTorch's message for an operator without a forward-mode formula starts with
// "Trying to use forward AD with <op> that does not support it".
std::string unsupported_operator(const std::string& message) {
  const std::string head = "forward AD with ";
  const auto at = message.find(head);
  if (at == std::string::npos) return "";
  const auto start = at + head.size();
  const auto end = message.find(' ', start);
  return message.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string first_line(const std::string& message) {
  return message.substr(0, message.find('\n'));
}

// Runs `body`; a LibTorch error on the way becomes ForwardModeUnsupported, naming the operator
// when it is a missing forward-mode formula. `who` names the method and its route ("cg (mode
// jvp)"), `remedy` what to choose instead.
template <typename Body>
auto translating(const std::string& who, const Level& curr, const char* route,
                 const std::string& remedy, Body&& body) {
  try {
    return body();
  } catch (const c10::OutOfMemoryError&) {
    throw;  // (not forward mode's to decide: the same error in any route)
  } catch (const mlo::StoppedTangent& e) {
    // (the loss met a constant computed from the parameters: name the method and the problem)
    throw ForwardModeUnsupported(c10::str(who, ": problem '", curr.name(), "': ", e.what(),
                                          "; ", remedy));
  } catch (const c10::Error& e) {
    if (is_out_of_memory(e)) throw;  // (a CPU allocator's failure is a plain c10::Error)
    const std::string message = e.what_without_backtrace();
    if (message.find("custom Function") != std::string::npos) {
      throw ForwardModeUnsupported(c10::str(
          who, ": problem '", curr.name(), "': the ", route, " reaches a custom ",
          "autograd function (activation checkpointing, a memory-efficient activation), which ",
          "LibTorch ", detail::torch_version(), " cannot run in forward mode; ", remedy,
          ", or turn checkpointing off"));
    }
    const std::string op = unsupported_operator(message);
    if (!op.empty()) {
      throw ForwardModeUnsupported(c10::str(
          who, ": problem '", curr.name(), "': LibTorch ", detail::torch_version(),
          " has no forward-mode formula for '", op, "', which the ", route, " reaches; ",
          remedy));
    }
    // NOTE: any other LibTorch error in forward mode (a custom autograd function without a
    // forward-mode rule, ...) is reported the same way, so that mode auto falls back; an error
    // that is not forward mode's comes back from the reverse-mode route.
    throw ForwardModeUnsupported(c10::str(who, ": problem '", curr.name(), "': LibTorch ",
                                          detail::torch_version(), " failed in forward mode (",
                                          route, "): ", first_line(message)));
  }
}

// What the JVP routes of darts, sama, neumann and cg are named in errors, and their remedy.
std::string jvp_route(const char* method) { return std::string(method) + " (mode jvp)"; }
constexpr const char* kJvpRemedy =
    "choose mode: auto (falls back where LibTorch has none) or the reverse-mode route";

}  // namespace

DualLevel::DualLevel() : index_(0) {
  // NOTE: LibTorch allows one level at a time (it refuses a nested one), and saved tensors keep
  // their tangents for level 0 only, which forward-over-reverse reads back in the backward pass.
  try {
    index_ = torch::autograd::ForwardADLevel::get_next_idx();
  } catch (const c10::Error& e) {
    throw Error(c10::str("forward mode: another forward-mode level is active in this process ",
                         "(LibTorch: ", first_line(e.what_without_backtrace()), ")"));
  }
  MLO_INTERNAL_ASSERT(index_ == 0, "forward-mode level ", index_, " instead of 0");
}

DualLevel::~DualLevel() { torch::autograd::ForwardADLevel::release_idx(index_); }

void DualLevel::set_tangents(const TensorList& primals, const TensorList& tangents) const {
  MLO_INTERNAL_ASSERT(primals.size() == tangents.size(), primals.size(), " tensors but ",
                      tangents.size(), " tangents");
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < primals.size(); ++i) {
    // (a copy: an in-place update of the primal in forward mode updates its tangent in place,
    // which must not reach the caller's vector)
    primals[i]._set_fw_grad(tangents[i].detach().to(primals[i].options()).clone(), index_,
                            /*is_inplace_op=*/false);
  }
}

at::Tensor DualLevel::tangent(const at::Tensor& t) const {
  if (!t.defined()) return {};
  return t._fw_grad(index_);
}

void in_forward_mode(const char* method, const Level& curr, const char* route,
                     const char* remedy, const std::function<void()>& body) {
  translating(method, curr, route, remedy, [&] {
    body();
    return 0;
  });
}

void check_forward_mode(const Level& curr, const char* method) {
  if (curr.shards_parameters()) {
    throw ForwardModeUnsupported(c10::str(
        method, " (mode jvp): problem '", curr.name(), "' shards its parameters (zero3), which ",
        "forward mode does not follow; choose mode: auto or the reverse-mode route"));
  }
}

namespace {

// The tangent a product is taken along: u / |u|, whose entries stay in range in low precision
// (a raw u, scaled by a loss scale or tiny, may overflow or underflow in fp16); the product,
// linear in u, is scaled back by |u|. |u| = 0 gives 0 (no product needed), a non-finite |u|
// keeps u as it is (the product comes out non-finite, as the finite difference's does).
struct Direction {
  TensorList unit;
  double size = 1.0;
  bool zero = false;
  explicit Direction(const TensorList& u) : size(norm(u)) {
    zero = size == 0.0;
    if (!std::isfinite(size)) size = 1.0;
    unit = scale(u, 1.0 / (zero ? 1.0 : size));
  }
  void scale_back(TensorList& result) const {
    for (auto& t : result) t.mul_(size);
  }
};

// Adds to `total` the tangent along u (set on `curr`'s parameters) of the gradient of `curr`'s
// loss with respect to `inputs`, forward-over-reverse, one micro-batch of the window at a time.
void tangent_of_gradient(Level& curr, const TensorList& u, const TensorList& inputs,
                         const char* method, TensorList& total) {
  const std::size_t n = std::max<std::size_t>(1, curr.batches().size());
  for (std::size_t i = 0; i < n; ++i) {
    translating(jvp_route(method), curr, "backward pass of the loss", kJvpRemedy, [&] {
      DualLevel level;
      level.set_tangents(curr.parameters(), u);
      const at::Tensor loss = curr.loss(i);
      if (!loss.requires_grad()) return 0;
      const auto grads = torch::autograd::grad({loss}, inputs, /*grad_outputs=*/{},
                                               /*retain_graph=*/false, /*create_graph=*/false,
                                               /*allow_unused=*/true);
      for (std::size_t k = 0; k < grads.size(); ++k) {
        const at::Tensor t = level.tangent(grads[k]);
        if (t.defined()) total[k].add_(t.detach());
      }
      return 0;
    });
  }
}

}  // namespace

TensorList forward_mixed(Level& curr, const TensorList& lambda, const TensorList& u_in,
                         const char* method) {
  check_forward_mode(curr, method);
  if (lambda.empty()) return {};
  const Direction direction(u_in);
  if (direction.zero) return zeros_like(lambda);
  const TensorList& u = direction.unit;
  at::AutoGradMode enable_grad(true);
  TensorList total = zeros_like(lambda);
  if (curr.separable_reevaluation()) {
    // L = sum_i c_i l_i: the tangent of L along u is sum_i c_i dl_i, with a graph through the
    // coefficients only; its gradient is taken after the level exits, in reverse mode alone.
    const std::size_t n = std::max<std::size_t>(1, curr.batches().size());
    for (std::size_t i = 0; i < n; ++i) {
      const at::Tensor directional =
          translating(jvp_route(method), curr, "forward pass of the terms", kJvpRemedy,
                      [&] {
            DualLevel level;
            level.set_tangents(curr.parameters(), u);
            // (held here, the tangent outlives the level that drops it from the loss)
            return level.tangent(curr.loss(i));
          });
      if (directional.defined()) axpy(1.0, grad_or_zeros(directional, lambda), total);
    }
  } else {
    // Forward-over-reverse: the tangent of dL/dlambda along u.
    tangent_of_gradient(curr, u, lambda, method, total);
  }
  direction.scale_back(total);
  return total;
}

TensorList forward_hvp(Level& curr, const TensorList& u_in, const char* method) {
  check_forward_mode(curr, method);
  const TensorList& w = curr.parameters();
  TensorList total = zeros_like(w);
  const Direction direction(u_in);
  if (direction.zero) return total;
  const TensorList& u = direction.unit;
  at::AutoGradMode enable_grad(true);
  tangent_of_gradient(curr, u, w, method, total);
  direction.scale_back(total);
  curr.mean(total);
  return total;
}

TensorList negative_mixed(Level& curr, Level& prev, const TensorList& u, MixedMode mode,
                          const char* method, ForwardRoute& route,
                          const std::function<TensorList()>& difference) {
  if (mode == MixedMode::kFiniteDifference || route.fallen_back) return difference();
  try {
    if (prev.shards_parameters()) {
      // NOTE: zero3's reduce-scatter of the upper gradients carries no tangents.
      throw ForwardModeUnsupported(c10::str(
          method, " (mode jvp): problem '", prev.name(), "' above '", curr.name(),
          "' shards its parameters (zero3), which forward mode does not follow; choose mode: ",
          "finite_difference or auto"));
    }
    TensorList result = forward_mixed(curr, prev.parameters(), u, method);
    negate_(result);
    if (!route.logged) {
      route.logged = true;
      spdlog::info("{}: problem '{}' takes the exact mixed product in forward mode ({})",
                   method, curr.name(),
                   curr.separable_reevaluation()
                       ? "its separable loss's terms forward, the coefficients backward"
                       : "forward-over-reverse");
    }
    return result;
  } catch (const ForwardModeUnsupported& e) {
    if (mode == MixedMode::kJvp) throw;
    spdlog::warn("{}; mode auto: the finite difference from now on", e.what());
    route.fallen_back = true;
    route.logged = true;
  }
  return difference();
}

SecondOrder::SecondOrder(Level& curr, HvpMode mode, const char* method, Route& route)
    : curr_(&curr), mode_(mode), method_(method), route_(&route) {
  if (mode_ == HvpMode::kDoubleBackward || route_->fallen_back) use_reverse();
}

void SecondOrder::use_reverse() {
  if (!reverse_) reverse_ = std::make_unique<LowerGradient>(*curr_);
}

template <typename Forward, typename Reverse>
TensorList SecondOrder::take(Forward&& forward, Reverse&& reverse) {
  if (!reverse_) {
    try {
      TensorList result = forward();
      if (!route_->logged) {
        route_->logged = true;
        spdlog::info("{}: problem '{}' takes its second-order products in forward mode ({})",
                     method_, curr_->name(),
                     curr_->separable_reevaluation()
                         ? "Hessian-vector products forward-over-reverse, the mixed product "
                           "through the separable loss's terms"
                         : "forward-over-reverse");
      }
      return result;
    } catch (const ForwardModeUnsupported& e) {
      if (mode_ != HvpMode::kAuto) throw;
      spdlog::warn("{}; mode auto: reverse mode from now on", e.what());
      route_->fallen_back = true;
      route_->logged = true;
      use_reverse();
    }
  }
  return reverse();
}

TensorList SecondOrder::hvp(const TensorList& u) {
  return take([&] { return forward_hvp(*curr_, u, method_); },
              [&] { return reverse_->hvp(u); });
}

TensorList SecondOrder::mixed(const TensorList& x, const TensorList& lambda) {
  return take([&] { return forward_mixed(*curr_, lambda, x, method_); },
              [&] { return reverse_->mixed(x, lambda); });
}

}  // namespace hypergrad
}  // namespace mlo
