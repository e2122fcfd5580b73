#include <mlo/hypergrad/unrolled.h>

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>
#include <mlo/hypergrad/binomial_schedule.h>
#include <mlo/hypergrad/differentiable_optimizer.h>

#include <mlo/hypergrad/finite_difference.h>

#include <spdlog/spdlog.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace mlo {
namespace hypergrad {

/// What the lower problem reported during the current unroll.
struct Unrolled::Recording {
  std::unique_ptr<DifferentiableOptimizer> optimizer;
  OptimizerState start;                     // x_0: parameters and optimizer state
  std::vector<std::vector<Batch>> batches;  // per step: its micro-batches
  std::vector<std::vector<double>> lrs;     // per step: each parameter's learning rate
  bool started = false;
};

namespace {



// Replays the recorded steps of `curr` from given states: plain (no graph) or reversed (one
// step's graph, back-propagating an adjoint). Writes `curr`'s parameters in place; the caller
// restores them.
class Replay {
 public:
  Replay(Level& curr, const TensorList& lambda, const DifferentiableOptimizer& optimizer,
         const std::vector<std::vector<Batch>>& batches,
         const std::vector<std::vector<double>>& lrs)
      : curr_(curr),
        params_(curr.parameters()),
        lambda_(lambda),
        optimizer_(optimizer),
        batches_(batches),
        lrs_(lrs),
        lambda_grad_(zeros_like(lambda)) {}

  // x_t from x_{t-1} (steps are numbered from 1).
  OptimizerState advance(const OptimizerState& x, int64_t t) {
    load(x);
    const at::Tensor l = loss(t);
    const TensorList g = grad_or_zeros(l, params_);
    at::NoGradGuard no_grad;
    return optimizer_.step(x, g, lrs_[static_cast<size_t>(t - 1)]);
  }

  // Turns the adjoint of x_t into the adjoint of x_{t-1}, given x_{t-1}; adds step t's share
  // to the gradient of lambda.
  void reverse(const OptimizerState& x, int64_t t, TensorList& adjoint) {
    const size_t n = params_.size();
    load(x);
    TensorList in = x.tensors();
    TensorList inputs = params_;
    std::vector<size_t> leaf_slot;
    for (size_t k = 0; k < in.size(); ++k) {
      if (k < n) {
        in[k] = params_[k];
      } else if (in[k].defined()) {
        in[k] = in[k].detach().requires_grad_(true);
        inputs.push_back(in[k]);
        leaf_slot.push_back(k);
      }
    }
    const size_t lambda_offset = inputs.size();
    inputs.insert(inputs.end(), lambda_.begin(), lambda_.end());

    const at::Tensor l = loss(t);
    TensorList g(n);
    if (l.requires_grad()) {
      g = torch::autograd::grad({l}, params_, /*grad_outputs=*/{}, /*retain_graph=*/true,
                                /*create_graph=*/true, /*allow_unused=*/true);
    }
    const OptimizerState out = optimizer_.step(OptimizerState::from_tensors(in, x.steps), g,
                                               lrs_[static_cast<size_t>(t - 1)]);
    const TensorList out_tensors = out.tensors();
    TensorList outputs, grad_outputs;
    for (size_t k = 0; k < out_tensors.size(); ++k) {
      if (out_tensors[k].defined() && out_tensors[k].requires_grad() && adjoint[k].defined()) {
        outputs.push_back(out_tensors[k]);
        grad_outputs.push_back(adjoint[k]);
      }
    }
    TensorList next(adjoint.size());
    if (outputs.empty()) {
      for (size_t i = 0; i < n; ++i) next[i] = at::zeros_like(params_[i]);
      adjoint = std::move(next);
      return;
    }
    const auto grads = torch::autograd::grad(outputs, inputs, grad_outputs,
                                             /*retain_graph=*/false, /*create_graph=*/false,
                                             /*allow_unused=*/true);
    for (size_t i = 0; i < n; ++i) {
      next[i] = grads[i].defined() ? grads[i] : at::zeros_like(params_[i]);
    }
    for (size_t j = 0; j < leaf_slot.size(); ++j) next[leaf_slot[j]] = grads[n + j];
    for (size_t j = 0; j < lambda_.size(); ++j) {
      if (grads[lambda_offset + j].defined()) lambda_grad_[j].add_(grads[lambda_offset + j]);
    }
    adjoint = std::move(next);
  }

  TensorList take_lambda_grad() { return std::move(lambda_grad_); }

 private:
  void load(const OptimizerState& x) {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(x.params[i]);
  }

  // The mean loss of step t's micro-batches at the loaded parameters.
  at::Tensor loss(int64_t t) {
    const auto& batches = batches_[static_cast<size_t>(t - 1)];
    at::Tensor total;
    for (const Batch& b : batches) {
      at::Tensor value = curr_.loss(b);
      if (batches.size() > 1) value = value / static_cast<double>(batches.size());
      total = total.defined() ? total + value : value;
    }
    return total;
  }

  Level& curr_;
  TensorList params_;
  const TensorList& lambda_;
  const DifferentiableOptimizer& optimizer_;
  const std::vector<std::vector<Batch>>& batches_;
  const std::vector<std::vector<double>>& lrs_;
  TensorList lambda_grad_;
};

// Bytes of one inner state: each parameter with the optimizer slots its rule keeps.
int64_t state_bytes(const DifferentiableOptimizer& optimizer, const TensorList& params) {
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const UpdateSettings& s = optimizer.settings()[i];
    int64_t copies = 1;
    if (s.optimized && s.rule == UpdateRule::kSGD && s.momentum != 0) copies += 1;
    if (s.optimized && s.rule != UpdateRule::kSGD) copies += s.amsgrad ? 3 : 2;
    total += copies * static_cast<int64_t>(params[i].numel() * params[i].element_size());
  }
  return total;
}

// A budget below one inner state would mean no snapshot: K^2/2 recomputed steps, silently.
void check_budget(const UnrolledOptions& options, int64_t bytes) {
  MLO_CHECK(options.budget_bytes() == 0 || options.budget_bytes() >= bytes,
            "unrolled.budget_bytes ", options.budget_bytes(),
            " is below the size of one inner state (parameters plus optimizer state, ", bytes,
            " bytes): no snapshot would fit; raise it or use snapshots");
}

}  // namespace

Unrolled::Unrolled(UnrolledOptions options)
    : options_(std::move(options)), recording_(std::make_unique<Recording>()) {
  check_options(options_);
}

Unrolled::~Unrolled() = default;

void Unrolled::check(const MethodContext& context) const {
  const Problem& curr = context.problem;
  // NOTE: the engine prefixes the problem's name.
  // The replay runs the problem's own loss from the unroll's start with the parents' current
  // parameters: wrong when a second parent stepped in between (the engine steps parents in
  // turn), and for a middle level, whose steps also followed the hypergradients from below.
  MLO_CHECK(context.parents <= 1, "unrolled supports one parent, this problem has ",
            context.parents,
            " (each parent's replay would see the parameters the parents stepped before it "
            "already updated); use another method");
  MLO_CHECK(!context.middle,
            "unrolled cannot serve a middle level (a problem with problems below it): the "
            "replay of its own loss misses the hypergradients its steps followed; use another "
            "method");
  // The replay on one rank's shard is not the trajectory of the averaged steps.
  MLO_CHECK(!context.data_parallel || context.strategy == dist::Strategy::kDefault,
            "the unrolled method cannot run data parallel (its replay on one rank's shard is "
            "not the trajectory of the averaged steps); set data_parallel false for this "
            "problem, or use another method");
  MLO_CHECK(curr.config().gradient_clipping() == 0,
            "unrolled: gradient_clipping is not part of the differentiable replay; set it to 0 "
            "(got ",
            curr.config().gradient_clipping(), ")");
  if (!curr.has_optimizer()) return;  // reported by the engine with its own message
  const std::string reason = DifferentiableOptimizer::unsupported(curr.optimizer());
  MLO_CHECK(reason.empty(), "unrolled cannot differentiate this optimizer's update: ", reason);
  const DifferentiableOptimizer optimizer(curr.optimizer(), curr.parameters(), curr.name());
  check_budget(options_, state_bytes(optimizer, curr.parameters()));
}

int64_t Unrolled::recorded_steps() const {
  return static_cast<int64_t>(recording_->batches.size());
}

void Unrolled::on_unroll_start(Level& curr) {
  Recording& r = *recording_;
  const auto params = curr.parameters();
  r.optimizer = std::make_unique<DifferentiableOptimizer>(curr.optimizer(), params, curr.name());
  r.start = r.optimizer->read_state(curr.optimizer(), params);
  r.batches.clear();
  r.lrs.clear();
  r.started = true;
}

void Unrolled::before_optimizer_step(Level& curr) {
  Recording& r = *recording_;
  if (!r.started) return;
  r.batches.push_back(curr.batches());
  r.lrs.push_back(r.optimizer->learning_rates(curr.optimizer()));
}

std::vector<at::Tensor> Unrolled::apply(const std::vector<at::Tensor>& v_in, Level& curr,
                                        Level& prev) {
  at::AutoGradMode enable_grad(true);
  Recording& r = *recording_;
  const TensorList params = curr.parameters();
  const TensorList lambda = prev.parameters();
  const TensorList v = defined_or_zeros(v_in, params, "unrolled", curr.name());
  const auto steps = static_cast<int64_t>(r.batches.size());
  stats_ = Stats();
  // NOTE: the recording is not part of the engine's saved state; a run resumed in the middle of
  // an unroll has lost the trajectory's start, and a zero hypergradient would silently differ
  // from the uninterrupted run. A save at an unroll boundary resumes with a fresh recording.
  MLO_CHECK(r.started, "problem '", curr.name(), "': unrolled cannot resume in the middle of an unroll (the inner ",
            "trajectory's start state is not saved); save at an unroll boundary (save_step a ",
            "multiple of unroll_steps) or restart");
  if (steps == 0 || lambda.empty()) return zeros_like(lambda);
  const DifferentiableOptimizer& optimizer = *r.optimizer;
  stats_.steps = steps;
  stats_.state_bytes = state_bytes(optimizer, params);
  if (options_.checkpointing() == UnrollCheckpointing::kBinomial) {
    check_budget(options_, stats_.state_bytes);
  }

  const TensorList saved = clone(params);
  RestoreOnExit restore(params, saved);
  Replay replay(curr, lambda, optimizer, r.batches, r.lrs);

  TensorList adjoint(params.size() * 5);
  for (size_t i = 0; i < params.size(); ++i) adjoint[i] = v[i];

  // Before reversing the last step: x_K recomputed from x_{K-1} must be the current weights.
  auto check_final = [&](const OptimizerState& before_last) {
    if (final_checked_) return;  // once: it costs a forward step and an extra replay
    final_checked_ = true;
    const OptimizerState last = replay.advance(before_last, steps);
    const double diff = norm(add_scaled(last.params, -1.0, saved));
    const double scale = std::max(norm(saved), 1e-30);
    if (!(diff <= 1e-3 * scale)) {
      spdlog::warn(
          "unrolled: problem '{}': replaying its {} recorded steps ends {:.3g} (relative)"
          " away from its weights; grad_callback, param_callback, a custom optimizer "
          "step or randomness in training_step are not replayed, so the hypergradient "
          "is that of the replayed trajectory",
          curr.name(), steps, diff / scale);
    }
  };

  if (options_.checkpointing() == UnrollCheckpointing::kNone) {
    std::vector<OptimizerState> states;
    states.reserve(static_cast<size_t>(steps));
    states.push_back(r.start);
    for (int64_t t = 1; t < steps; ++t) states.push_back(replay.advance(states.back(), t));
    stats_.snapshots = steps - 1;
    stats_.advances = steps - 1;
    stats_.max_stored = steps;
    check_final(states.back());
    for (int64_t t = steps; t >= 1; --t) {
      replay.reverse(states.back(), t, adjoint);
      states.pop_back();
    }
  } else {
    int64_t snapshots = options_.snapshots();
    if (snapshots == 0) {
      snapshots = options_.budget_bytes() > 0
                      ? options_.budget_bytes() / std::max<int64_t>(stats_.state_bytes, 1)
                      : default_snapshots(steps);
    }
    snapshots = std::min(snapshots, std::max<int64_t>(steps - 1, 0));
    stats_.snapshots = snapshots;
    std::map<int64_t, OptimizerState> stored;
    stored.emplace(0, r.start);
    OptimizerState working;
    int64_t most = 1;
    using Kind = ReverseAction::Kind;
    for (const ReverseAction& a : binomial_schedule(steps, snapshots)) {
      switch (a.kind) {
        case Kind::kRestore:
          working = stored.at(a.index);
          break;
        case Kind::kAdvance:
          working = replay.advance(working, a.index + 1);
          ++stats_.advances;
          break;
        case Kind::kStore:
          stored[a.index] = working;
          most = std::max<int64_t>(most, static_cast<int64_t>(stored.size()));
          break;
        case Kind::kFree:
          stored.erase(a.index);
          break;
        case Kind::kReverse:
          if (a.index == steps) check_final(working);
          replay.reverse(working, a.index, adjoint);
          break;
      }
    }
    stats_.max_stored = most;
  }
  return replay.take_lambda_grad();
}

MLO_REGISTER_METHOD(UnrolledOptions);

}  // namespace hypergrad

void UnrolledOptions::visit(Fields& fields) {
  fields.enumeration("checkpointing", checkpointing());
  fields("snapshots", snapshots(), at_least(0));
  fields("budget_bytes", budget_bytes(), at_least(0));
}

std::optional<OptionError> UnrolledOptions::validate() const {
  if (snapshots() > 0 && budget_bytes() > 0) {
    return OptionError{"budget_bytes", "give snapshots or budget_bytes, not both (snapshots is " +
                                           std::to_string(snapshots()) + ")"};
  }
  if (checkpointing() == UnrollCheckpointing::kNone && (snapshots() > 0 || budget_bytes() > 0)) {
    return OptionError{snapshots() > 0 ? "snapshots" : "budget_bytes",
                       "needs unrolled.checkpointing: binomial (checkpointing none keeps every inner "
                       "state)"};
  }
  return std::nullopt;
}

std::unique_ptr<Hypergradient> UnrolledOptions::make() const {
  return std::make_unique<hypergrad::Unrolled>(*this);
}

}  // namespace mlo
