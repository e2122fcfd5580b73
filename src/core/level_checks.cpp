// The checks of a level's links on the autograd graph (LevelRuntime): at a problem's first
// step, that every declared edge into its loss is real and that its loss reaches its own
// parameters; at its first hypergradient, when a path's result is exactly zero, that each hop's
// lower gradient depends on the hop's upper parameters (which a pair linked the wrong way round
// fails although each loss reads the other's parameters).
#include "level_runtime.h"

#include "buffer_snapshot.h"
#include "reach.h"

#include <mlo/base/error.h>

#include <torch/autograd.h>

#include <algorithm>
#include <string>

namespace mlo {
namespace detail {

void LevelRuntime::check_inputs(const at::Tensor& loss, bool has_paths,
                                const std::vector<std::pair<const Problem*, bool>>& inputs) const {
  const std::string& name = problem_.name();
  for (const auto& [input, upper] : inputs) {
    // (an upper problem's parameters reach the loss unless the method links the levels
    // otherwise: Hypergradient::differentiates_loss)
    if (upper && method_ && !method_->differentiates_loss()) continue;
    if (detail::reaches(loss, input->parameters())) continue;
    throw Error(
        "problem '" + name + "': its loss does not depend on the parameters of problem '" +
        input->name() + "', though the dependency graph says it does (" +
        (upper ? "u2l " + input->name() + " -> " + name + ": the upper's parameters enter the "
                                                          "lower's loss"
               : "l2u " + input->name() + " -> " + name + ": the lower's parameters enter the "
                                                          "upper's loss") +
        "); check the order of link(upper, lower)'s arguments, or remove the edge");
  }
  // A problem without hypergradient paths trains on its own loss's gradient alone: a loss that
  // reaches none of its parameters would train nothing (a lower problem linked as an upper one).
  if (!has_paths && !problem_.config().allow_unused_parameters() && !trainable_.empty() &&
      !detail::reaches(loss, trainable_)) {
    const bool lower = std::any_of(inputs.begin(), inputs.end(),
                                   [](const auto& input) { return input.second; });
    throw Error("problem '" + name + "': its loss does not depend on any of its own trainable "
                "parameters, so its steps would change nothing" +
                std::string(lower ? "; as a lower problem (one with a problem above it) its loss "
                                    "must; check the order of link(upper, lower)'s arguments"
                                  : ""));
  }
}

void LevelRuntime::check_zero_path(const Path& path) {
  for (const Hop& hop : path.hops()) {
    const std::optional<bool> depends =
        static_cast<LevelRuntime*>(hop.curr)->gradient_depends_on(*hop.prev);
    if (!depends.has_value() || *depends) continue;
    const std::string& lower = hop.curr->name();
    const std::string& upper = hop.prev->name();
    throw Error(c10::str(
        "problem '", upper, "' is an upper level of problem '", lower, "' (u2l ", upper, " -> ",
        lower, ", as link(", upper, ", ", lower, ") declares), but the gradient of '", lower,
        "''s loss with respect to its own parameters does not depend on the parameters of '",
        upper, "': no step of '", lower, "' can depend on '", upper, "', and the hypergradient of '",
        upper, "' through it is exactly 0 at every step. If '", lower, "' is the upper level of ",
        "the two (its parameters shape the training of '", upper,
        "'), the link is written the wrong way round: link(", lower, ", ", upper, ")"));
  }
}

std::optional<bool> LevelRuntime::gradient_depends_on(const Level& upper) {
  Problem& p = problem_;
  if (trainable_.empty() || (p.window_.empty() && !p.current_batch_.data.defined())) {
    return std::nullopt;
  }
  // An evaluation, not a re-evaluation: a loss may leave out of a re-evaluation's graph what a
  // method does not differentiate. It leaves the step's metrics and every buffer as they were.
  const Metrics metrics = p.metrics_;
  detail::BufferSnapshot own(own_buffers_);
  detail::BufferSnapshot peers(peer_buffers_);
  const at::Tensor value =
      evaluate(p.window_.empty() ? p.current_batch_ : p.window_.back(), LossCall::kEvaluation);
  p.metrics_ = metrics;
  if (!value.defined() || !value.requires_grad()) return std::nullopt;
  const std::vector<at::Tensor> grads =
      torch::autograd::grad({value}, trainable_, /*grad_outputs=*/{}, /*retain_graph=*/true,
                            /*create_graph=*/true, /*allow_unused=*/true);
  bool graph = false;
  for (const auto& g : grads) {
    if (!g.defined() || !g.requires_grad()) continue;
    graph = true;
    if (detail::reaches(g, upper.parameters())) return true;
  }
  if (!graph) return std::nullopt;
  return false;
}

}  // namespace detail
}  // namespace mlo
