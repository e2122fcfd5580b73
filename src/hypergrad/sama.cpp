#include <mlo/hypergrad/sama.h>

#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>
#include <mlo/detail/torch_compat.h>
#include <mlo/hypergrad/differentiable_optimizer.h>

#include <mlo/hypergrad/finite_difference.h>

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <cmath>

namespace mlo {
namespace hypergrad {
namespace {

// Adam/AdamW moments and step of one parameter after the latest step (undefined: none yet).
struct AdamMoments {
  at::Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  int64_t step = 0;
};

AdamMoments adam_moments(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                         UpdateRule rule) {
  AdamMoments out;
  auto& state = optimizer.state();
  const auto it = mlo::detail::find_optimizer_state(state, param);
  if (it == state.end()) return out;
  if (rule == UpdateRule::kAdam) {
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*it->second);
    out.exp_avg = s.exp_avg();
    out.exp_avg_sq = s.exp_avg_sq();
    out.max_exp_avg_sq = s.max_exp_avg_sq();
    out.step = s.step();
  } else {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.exp_avg = s.exp_avg();
    out.exp_avg_sq = s.exp_avg_sq();
    out.max_exp_avg_sq = s.max_exp_avg_sq();
    out.step = s.step();
  }
  return out;
}

}  // namespace

Sama::Sama(SamaOptions options) : options_(std::move(options)) {
  check_options(options_);
}

Sama::~Sama() = default;

void Sama::check(const MethodContext& context) const {
  const Problem& curr = context.problem;
  // NOTE: the engine prefixes the problem's name.
  // Its preconditioner reads the optimizer state of every parameter, which zero1/zero2 keep
  // on one rank each. Under zero3 each rank holds the state of its own parameter shards, which
  // are all the preconditioner reads there (element by element); a module that is no Chain is
  // served as zero2.
  const bool sharded =
      dist::shards_optimizer_state(context.strategy) && !context.shards_parameters;
  MLO_CHECK(!(context.data_parallel && sharded),
            "sama reads the optimizer state of every parameter, which strategy ",
            dist::to_string(context.strategy), " shards over the ranks",
            context.strategy == dist::Strategy::kZero3
                ? " (this problem's module is not an mlo::nn::Chain, so zero3 serves it as zero2)"
                : "",
            "; use strategy distributed, or set data_parallel false for this problem");
  MLO_CHECK(options_.mode() != MixedMode::kJvp || !context.shards_parameters, "sama.mode: ",
            "problem '", curr.name(), "' shards its parameters (zero3), which forward mode ",
            "does not follow; choose finite_difference or auto");
  if (!curr.has_optimizer()) return;  // reported by the engine with its own message
  const std::string reason = DifferentiableOptimizer::unsupported(curr.optimizer());
  MLO_CHECK(reason.empty(), "sama cannot precondition with this optimizer: ", reason);
}

void Sama::save(torch::serialize::OutputArchive& archive) const {
  std::vector<int64_t> defined;
  for (size_t i = 0; i < last_grads_.size(); ++i) {
    defined.push_back(last_grads_[i].defined() ? 1 : 0);
    if (defined.back()) archive.write("grad." + std::to_string(i), last_grads_[i], true);
  }
  archive.write("grad_defined", c10::IValue(defined));
  archive.write("lrs", c10::IValue(last_lrs_));
  archive.write("created_buffer",
                c10::IValue(std::vector<int64_t>(created_buffer_.begin(), created_buffer_.end())));
}

void Sama::load(torch::serialize::InputArchive& archive) {
  const std::string owner = "sama state";
  last_lrs_ = mlo::archive::read_doubles(archive, "lrs", owner);
  const auto created = mlo::archive::read_ints(archive, "created_buffer", owner);
  created_buffer_.assign(created.begin(), created.end());
  const auto defined = mlo::archive::read_ints(archive, "grad_defined", owner);
  last_grads_.assign(defined.size(), at::Tensor());
  for (size_t i = 0; i < defined.size(); ++i) {
    if (!defined[i]) continue;
    at::Tensor g;
    archive.read("grad." + std::to_string(i), g, true);
    last_grads_[i] = g;
  }
}

void Sama::before_optimizer_step(Level& curr) {
  const auto params = curr.parameters();
  const DifferentiableOptimizer opt(curr.optimizer(), params, curr.name());
  // NOTE: the schedule moves the learning rates right after the step; the Jacobian is the one
  // of the step just taken, with the rates it used.
  last_lrs_ = opt.learning_rates(curr.optimizer());
  last_grads_.assign(params.size(), at::Tensor());
  created_buffer_.assign(params.size(), false);
  auto& state = curr.optimizer().state();
  for (size_t i = 0; i < params.size(); ++i) {
    const UpdateSettings& s = opt.settings()[i];
    if (!s.optimized) continue;
    if (s.rule == UpdateRule::kSGD) {
      created_buffer_[i] = mlo::detail::find_optimizer_state(state, params[i]) == state.end();
      continue;
    }
    const at::Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    // NOTE: Adam's L2 weight decay enters the moments as g + wd w (w before the step); the
    // gradient is kept by reference: the problem hands the optimizer a fresh one every window.
    last_grads_[i] = (s.rule == UpdateRule::kAdam && s.weight_decay != 0)
                         ? g.detach() + s.weight_decay * params[i].detach()
                         : g.detach();
  }
}

std::vector<at::Tensor> Sama::precondition(const std::vector<at::Tensor>& v_in,
                                           Level& curr) const {
  const auto params = curr.parameters();
  const TensorList v = defined_or_zeros(v_in, params, "sama", curr.name());
  const DifferentiableOptimizer opt(curr.optimizer(), params, curr.name());
  const std::vector<double> lrs = last_lrs_.size() == params.size()
                                      ? last_lrs_
                                      : opt.learning_rates(curr.optimizer());
  at::NoGradGuard no_grad;
  TensorList out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const UpdateSettings& s = opt.settings()[i];
    if (!s.optimized) {
      out.push_back(at::zeros_like(v[i]));  // never updated: no response to lambda
      continue;
    }
    if (s.rule == UpdateRule::kSGD) {
      const bool created = i < created_buffer_.size() && created_buffer_[i];
      const double carried = s.momentum == 0 ? 1.0 : (created ? 1.0 : 1.0 - s.dampening);
      const double c = s.nesterov ? 1.0 + s.momentum * carried : carried;
      out.push_back(v[i] * (lrs[i] * c));
      continue;
    }
    const AdamMoments m = adam_moments(curr.optimizer(), params[i], s.rule);
    if (!m.exp_avg.defined() || m.step == 0) {
      out.push_back(v[i] * lrs[i]);  // no step yet: no state to read
      continue;
    }
    const double bias1 = 1 - std::pow(s.beta1, static_cast<double>(m.step));
    const double sqrt_bias2 = std::sqrt(1 - std::pow(s.beta2, static_cast<double>(m.step)));
    const at::Tensor second =
        s.amsgrad && m.max_exp_avg_sq.defined() ? m.max_exp_avg_sq : m.exp_avg_sq;
    const at::Tensor root = second.sqrt();
    const at::Tensor denom = root / sqrt_bias2 + s.eps;
    at::Tensor jacobian = (1 - s.beta1) / denom;
    const at::Tensor& g = i < last_grads_.size() ? last_grads_[i] : at::Tensor();
    if (g.defined()) {
      // d denom / dg = (1 - beta2) g / (sqrt(1 - beta2^t) sqrt(v)) where v moved with g (with
      // amsgrad only where the maximum is the current second moment); 0 where v = 0.
      at::Tensor moving = root > 0;
      if (s.amsgrad && m.max_exp_avg_sq.defined()) {
        moving = moving.logical_and(m.exp_avg_sq >= m.max_exp_avg_sq);
      }
      const at::Tensor safe_root = at::where(moving, root, at::ones_like(root));
      const at::Tensor d_denom =
          at::where(moving, (1 - s.beta2) * g / (sqrt_bias2 * safe_root), at::zeros_like(root));
      jacobian = jacobian - m.exp_avg * d_denom / (denom * denom);
    }
    out.push_back(v[i] * jacobian * (lrs[i] / bias1));
  }
  return out;
}

std::vector<at::Tensor> Sama::apply(const std::vector<at::Tensor>& v, Level& curr,
                                    Level& prev) {
  at::AutoGradMode enable_grad(true);
  const TensorList direction = precondition(v, curr);
  return negative_mixed(curr, prev, direction, options_.mode(), "sama", route_, [&] {
    return central_difference(curr, prev.parameters(), direction, options_.alpha());
  });
}

MLO_REGISTER_METHOD(SamaOptions);

}  // namespace hypergrad

void SamaOptions::visit(Fields& fields) {
  fields("alpha", alpha(), positive());
  fields.enumeration("mode", mode());
}

std::unique_ptr<Hypergradient> SamaOptions::make() const {
  return std::make_unique<hypergrad::Sama>(*this);
}

}  // namespace mlo
