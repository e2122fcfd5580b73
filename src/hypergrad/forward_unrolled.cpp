#include <mlo/hypergrad/forward_unrolled.h>

#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>
#include <mlo/hypergrad/differentiable_optimizer.h>
#include <mlo/hypergrad/forward_mode.h>
#include <mlo/hypergrad/vector.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/autograd.h>

#include <algorithm>
#include <string>
#include <utility>

namespace mlo {
namespace hypergrad {
namespace {

constexpr const char* kMethod = "forward";

int64_t scalars(const TensorList& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  return total;
}

// The level whose parameters are lambda: the one parent (check() refuses more).
Level& parent_of(const Level& curr) {
  MLO_CHECK(curr.parents().size() == 1, "forward: problem '", curr.name(), "' has ",
            curr.parents().size(), " parent levels; the method serves a problem with exactly one ",
            "problem above it on its hypergradient paths");
  return *curr.parents().front();
}

// A one-hot tangent for scalar `j` of `lambda`: the tensor it lies in and its value there.
std::pair<size_t, at::Tensor> unit_tangent(const TensorList& lambda, int64_t j) {
  for (size_t t = 0; t < lambda.size(); ++t) {
    const int64_t n = lambda[t].numel();
    if (j < n) {
      at::Tensor e = at::zeros(lambda[t].sizes(), lambda[t].options());
      e.view({-1})[j].fill_(1);
      return {t, e};
    }
    j -= n;
  }
  MLO_INTERNAL_ASSERT(false, "scalar index past lambda's size");
  return {};
}

}  // namespace

ForwardUnrolled::ForwardUnrolled(ForwardOptions options) : options_(std::move(options)) {
  check_options(options_);
}

ForwardUnrolled::~ForwardUnrolled() = default;

void ForwardUnrolled::check(const MethodContext& context) const {
  const Problem& curr = context.problem;
  // NOTE: the engine prefixes the problem's name.
  const size_t parents = std::max(context.parents, context.parent_problems.size());
  MLO_CHECK(parents <= 1, "forward supports one parent, this problem has ", parents,
            " (the tangents of one step would mix parameters the parents stepped in between); "
            "use another method");
  MLO_CHECK(!context.middle,
            "forward cannot serve a middle level (a problem with problems below it): its steps "
            "also follow the hypergradients from below, which the tangents do not carry; use "
            "another method");
  MLO_CHECK(!context.data_parallel || context.strategy == dist::Strategy::kDefault,
            "the forward method cannot run data parallel (the tangents of one rank's shard are "
            "not those of the averaged steps); set data_parallel false for this problem, or use "
            "another method");
  MLO_CHECK(curr.config().gradient_clipping() == 0,
            "forward: gradient_clipping is not part of the differentiated step; set it to 0 (got ",
            curr.config().gradient_clipping(), ")");
  // Roll-back restores the state from before the unroll and steps again: carried tangents would
  // belong to the state it left.
  MLO_CHECK(!(options_.carry() && curr.config().roll_back()),
            "forward.carry cannot follow roll_back (the redone step starts from the state before "
            "the unroll, the carried tangents from the state after it); set one of them false");
  int64_t m = 0;
  std::string names;
  for (const Problem* parent : context.parent_problems) {
    if (!parent->has_module()) continue;  // reported by the engine with its own message
    m += scalars(parent->parameters());
    names += (names.empty() ? "'" : ", '") + parent->name() + "'";
  }
  MLO_CHECK(m <= options_.max_hyperparameters(), "forward carries one tangent per upper-level ",
            "parameter and takes one forward-over-reverse pass per tangent and inner step; ",
            names, " has ", m, " parameters, above forward.max_hyperparameters (",
            options_.max_hyperparameters(), "); use unrolled, or raise the limit");
  if (!curr.has_optimizer()) return;  // reported by the engine with its own message
  const std::string reason = DifferentiableOptimizer::unsupported(curr.optimizer());
  MLO_CHECK(reason.empty(), "forward cannot differentiate this optimizer's update: ", reason);
}

int64_t ForwardUnrolled::tangent_bytes() const {
  int64_t total = 0;
  for (const auto& t : tangents_) {
    if (t.defined()) total += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return total;
}

void ForwardUnrolled::check_layout(const Level& curr, bool matches, int64_t upper) const {
  MLO_CHECK(matches, "forward: problem '", curr.name(), "': the tangents (", hyperparameters_,
            " upper-level parameters over ", tangents_.size() / 5, " lower tensors, as saved or ",
            "kept) do not match the problems (", upper, " upper-level parameters over ",
            curr.parameters().size(), " lower tensors of their shapes)");
}

void ForwardUnrolled::on_unroll_start(Level& curr) {
  const TensorList& w = curr.parameters();
  optimizer_ = std::make_unique<DifferentiableOptimizer>(curr.optimizer(), w, curr.name());
  const int64_t m = scalars(parent_of(curr).parameters());
  MLO_CHECK(m <= options_.max_hyperparameters(), "forward: problem '", curr.name(), "': its ",
            "parent has ", m, " parameters, above forward.max_hyperparameters (",
            options_.max_hyperparameters(), "); use unrolled, or raise the limit");
  const size_t slots = 5 * w.size();  // (the layout of OptimizerState::tensors())
  bool restart = !options_.carry() || !started_ || m != hyperparameters_ ||
                 tangents_.size() != slots;
  if (!restart && !expected_.empty()) {
    // Carried tangents describe the weights the last step left; weights set anew since
    // (on_inner_loop_start restarting them, param_callback) do not follow them.
    const double diff = norm(add_scaled(w, -1.0, expected_));
    if (!(diff <= 1e-6 * std::max(norm(expected_), 1e-30))) {
      if (!warned_restart_) {
        warned_restart_ = true;
        spdlog::warn("forward: problem '{}': its weights at this unroll's start are not those its "
                     "last step left (on_inner_loop_start or param_callback set them): the "
                     "carried tangents restart from zero here and wherever this happens again",
                     curr.name());
      }
      restart = true;
    }
  }
  expected_.clear();
  if (restart) {
    // Z_0 = 0: no tangent is held where none is non-zero.
    tangents_.assign(slots, at::Tensor());
    steps_ = 0;
  }
  hyperparameters_ = m;
  started_ = true;
}

void ForwardUnrolled::before_optimizer_step(Level& curr) {
  if (!started_) return;
  const TensorList& w = curr.parameters();
  const size_t n = w.size();
  if (!optimizer_) {
    // (after a resume: the optimizer's settings are read again from the problem)
    optimizer_ = std::make_unique<DifferentiableOptimizer>(curr.optimizer(), w, curr.name());
  }
  const TensorList& lambda = parent_of(curr).parameters();
  const int64_t m = hyperparameters_;
  check_layout(curr, m == scalars(lambda) && tangents_.size() == 5 * n, scalars(lambda));

  // The real step's state and gradients: the tangents are taken at the point the optimizer
  // steps from.
  const OptimizerState state = optimizer_->read_state(curr.optimizer(), w);
  const TensorList slots = state.tensors();
  for (size_t k = 0; k < slots.size(); ++k) {
    if (!tangents_[k].defined()) continue;
    const at::Tensor& like = slots[k].defined() ? slots[k] : w[k % n];
    std::vector<int64_t> shape{m};
    shape.insert(shape.end(), like.sizes().begin(), like.sizes().end());
    check_layout(curr, tangents_[k].sizes() == at::IntArrayRef(shape), scalars(lambda));
  }
  TensorList grads(n);
  for (size_t i = 0; i < n; ++i) {
    if (w[i].grad().defined()) grads[i] = w[i].grad().detach();
  }
  const std::vector<double> lrs = optimizer_->learning_rates(curr.optimizer());

  std::vector<TensorList> next(slots.size());
  at::AutoGradMode enable_grad(true);
  for (int64_t j = 0; j < m; ++j) {
    in_forward_mode(kMethod, curr, "backward pass of the loss or the optimizer update",
                    "use unrolled (reverse mode)", [&] {
      DualLevel level;
      // The lower parameters along Z_{t-1}[j] (zero at the unroll's start: set all the same, so
      // that the loss takes one route whatever the tangents), lambda along e_j.
      TensorList primals = w, directions;
      for (size_t i = 0; i < n; ++i) {
        directions.push_back(tangents_[i].defined() ? tangents_[i][j] : at::zeros_like(w[i]));
      }
      const auto [t, e] = unit_tangent(lambda, j);
      primals.push_back(lambda[t]);
      directions.push_back(e);
      level.set_tangents(primals, directions);

      // The tangent of the window's gradient, one micro-batch at a time.
      TensorList dg = zeros_like(w);
      const size_t micro = std::max<size_t>(1, curr.batches().size());
      for (size_t b = 0; b < micro; ++b) {
        const at::Tensor loss = curr.loss(b);
        if (!loss.requires_grad()) continue;
        const auto g = torch::autograd::grad({loss}, w, /*grad_outputs=*/{},
                                             /*retain_graph=*/false, /*create_graph=*/false,
                                             /*allow_unused=*/true);
        for (size_t i = 0; i < n; ++i) {
          const at::Tensor d = level.tangent(g[i]);
          if (d.defined()) dg[i].add_(d.detach());
        }
      }

      // The update in forward mode, from the real state along Z_{t-1}[j], with the real
      // gradients along their tangents.
      TensorList in(slots.size());
      primals.clear();
      directions.clear();
      for (size_t k = 0; k < slots.size(); ++k) {
        if (!slots[k].defined()) continue;
        in[k] = slots[k].detach().clone();
        if (tangents_[k].defined()) {
          primals.push_back(in[k]);
          directions.push_back(tangents_[k][j]);
        }
      }
      TensorList g_dual(n);
      for (size_t i = 0; i < n; ++i) {
        // (a missing gradient: the differentiable update counts it as zero, as unrolled's
        // replay does; the engine hands every parameter a defined one)
        if (!grads[i].defined()) continue;
        g_dual[i] = grads[i].clone();
        primals.push_back(g_dual[i]);
        directions.push_back(dg[i]);
      }
      level.set_tangents(primals, directions);
      const TensorList out =
          optimizer_->step(OptimizerState::from_tensors(in, state.steps), g_dual, lrs).tensors();
      if (options_.carry() && j == 0) {
        // (where this step leaves the weights, for the next unroll start's check)
        expected_.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
        for (auto& e : expected_) e = e.detach().clone();
      }
      for (size_t k = 0; k < out.size() && k < next.size(); ++k) {
        if (!out[k].defined()) continue;
        const at::Tensor d = level.tangent(out[k]);
        next[k].push_back(d.defined() ? d.detach() : at::zeros_like(out[k]));
      }
    });
  }
  for (size_t k = 0; k < next.size(); ++k) {
    tangents_[k] = static_cast<int64_t>(next[k].size()) == m && m > 0 ? at::stack(next[k])
                                                                       : at::Tensor();
  }
  ++steps_;
}

std::vector<at::Tensor> ForwardUnrolled::apply(const std::vector<at::Tensor>& v_in, Level& curr,
                                               Level& prev) {
  const TensorList& w = curr.parameters();
  const TensorList lambda = prev.parameters();
  const TensorList v = defined_or_zeros(v_in, w, kMethod, curr.name());
  TensorList out = zeros_like(lambda);
  if (!started_ || lambda.empty()) return out;
  const int64_t m = hyperparameters_;
  check_layout(curr, m == scalars(lambda) && tangents_.size() == 5 * w.size(), scalars(lambda));
  if (m == 0) return out;
  // Z^T v: scalar j of lambda gets sum_i <Z_i[j], v_i>.
  at::Tensor total;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!tangents_[i].defined()) continue;
    const at::Tensor z = tangents_[i].reshape({m, w[i].numel()});
    const at::Tensor part = z.mv(v[i].reshape({-1}).to(z.options()));
    total = total.defined() ? total + part : part;
  }
  if (!total.defined()) return out;
  int64_t offset = 0;
  for (size_t t = 0; t < lambda.size(); ++t) {
    const int64_t size = lambda[t].numel();
    out[t] = total.slice(0, offset, offset + size).reshape(lambda[t].sizes()).to(
        lambda[t].options());
    offset += size;
  }
  return out;
}

void ForwardUnrolled::save(torch::serialize::OutputArchive& archive) const {
  archive.write("started", c10::IValue(started_));
  archive.write("steps", c10::IValue(steps_));
  archive.write("hyperparameters", c10::IValue(hyperparameters_));
  std::vector<int64_t> defined;
  for (size_t k = 0; k < tangents_.size(); ++k) {
    defined.push_back(tangents_[k].defined() ? 1 : 0);
    if (defined.back()) archive.write("tangent." + std::to_string(k), tangents_[k], true);
  }
  archive.write("tangent_defined", c10::IValue(defined));
  // (carry: where the latest step left the weights, which the next unroll start compares)
  archive.write("expected_count", c10::IValue(static_cast<int64_t>(expected_.size())));
  for (size_t i = 0; i < expected_.size(); ++i) {
    archive.write("expected." + std::to_string(i), expected_[i], true);
  }
}

void ForwardUnrolled::load(torch::serialize::InputArchive& archive) {
  const std::string owner = "forward method state";
  started_ = mlo::archive::read_bool(archive, "started", owner);
  steps_ = mlo::archive::read_int(archive, "steps", owner);
  hyperparameters_ = mlo::archive::read_int(archive, "hyperparameters", owner);
  const auto defined = mlo::archive::read_ints(archive, "tangent_defined", owner);
  tangents_.assign(defined.size(), at::Tensor());
  for (size_t k = 0; k < defined.size(); ++k) {
    if (!defined[k]) continue;
    MLO_CHECK(archive.try_read("tangent." + std::to_string(k), tangents_[k], true), owner,
              ": entry 'tangent.", k, "' is missing");
  }
  optimizer_.reset();  // (read again from the problem at the next step)
  const int64_t expected = mlo::archive::read_int(archive, "expected_count", owner);
  expected_.assign(static_cast<size_t>(std::max<int64_t>(expected, 0)), at::Tensor());
  for (size_t i = 0; i < expected_.size(); ++i) {
    MLO_CHECK(archive.try_read("expected." + std::to_string(i), expected_[i], true), owner,
              ": entry 'expected.", i, "' is missing");
  }
}

MLO_REGISTER_METHOD(ForwardOptions);

}  // namespace hypergrad

void ForwardOptions::visit(Fields& fields) {
  fields("max_hyperparameters", max_hyperparameters(), at_least(1));
  fields("carry", carry());
}

std::unique_ptr<Hypergradient> ForwardOptions::make() const {
  return std::make_unique<hypergrad::ForwardUnrolled>(*this);
}

}  // namespace mlo
