#include "level_runtime.h"

#include "all_finite.h"
#include "buffer_snapshot.h"
#include "reach.h"
#include "dist/zero3.h"

#include <mlo/core/level.h>
#include <mlo/core/method.h>
#include <mlo/core/path.h>
#include <mlo/dist/process_group.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/precision.h>

#include <c10/util/ScopeExit.h>
#include <spdlog/spdlog.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>

namespace mlo {

const std::string& Level::name() const { return problem().name(); }
const ProblemConfig& Level::config() const { return problem().config(); }
torch::optim::Optimizer& Level::optimizer() const { return problem().optimizer(); }

bool Level::separable_reevaluation() const { return problem().separable_reevaluation(); }

namespace detail {

namespace {
// A level whose hypergradient is exactly zero at this many of its first steps gets a warning.
constexpr int64_t kZeroHypergradientSteps = 3;

// The sum of the squares of `v`'s defined tensors on this rank, in double.
double local_squares(const std::vector<at::Tensor>& v) {
  at::Tensor squares;
  for (const auto& t : v) {
    if (!t.defined()) continue;
    const at::Tensor s = t.to(at::kDouble).pow(2).sum();
    squares = squares.defined() ? squares + s : s;
  }
  return squares.defined() ? squares.item<double>() : 0.0;
}
}  // namespace

LevelRuntime::LevelRuntime(Problem& problem, memory::MemoryMeter* meter,
                           const std::vector<Problem*>& peers,
                           std::shared_ptr<dist::ProcessGroup> group, dist::Strategy strategy)
    : problem_(problem), meter_(meter) {
  Problem& p = problem_;
  for (const auto& t : p.module().parameters()) {
    if (t.requires_grad()) trainable_.push_back(t);
  }
  {
    const auto params = p.module().parameters();
    device_ = params.empty() ? c10::Device(c10::kCPU) : params.front().device();
  }
  sync_ = make_gradient_sync(
      group, strategy, p.config().data_parallel(),
      SyncedLevel{p.name(), p.has_module() ? &p.module() : nullptr,
                  p.has_optimizer() ? &p.optimizer() : nullptr, trainable_, device_,
                  p.config().offload() == Offload::kCpu},
      p.zero3_);
  own_buffers_ = p.module().buffers();
  for (const Problem* peer : peers) {
    if (peer == &p || !peer->module_) continue;
    for (const auto& b : peer->module_->buffers()) {
      // A buffer this problem shares with a peer (a shared backbone) is its own: its own step
      // updates it.
      const bool shared =
          std::any_of(own_buffers_.begin(), own_buffers_.end(), [&](const at::Tensor& o) {
            return o.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
          });
      if (!shared) peer_buffers_.push_back(b);
    }
  }
  std::optional<LossScaling> scaling = p.config().loss_scaling();
  if (!scaling && p.config().precision() == Precision::kFP16) scaling = LossScaling();
  p.scaler_ = scaling ? std::make_unique<memory::LossScaler>(*scaling) : nullptr;
  p.runtime_ = this;
}

LevelRuntime::~LevelRuntime() {
  if (problem_.runtime_ == this) problem_.runtime_ = nullptr;
}

at::Tensor LevelRuntime::loss() {
  const size_t n = problem_.window_.empty() ? 1 : problem_.window_.size();
  at::Tensor total = loss(size_t{0});
  for (size_t i = 1; i < n; ++i) total = total + loss(i);
  return total;
}

at::Tensor LevelRuntime::loss(size_t micro) {
  const auto& window = problem_.window_;
  const size_t n = window.empty() ? 1 : window.size();
  MLO_CHECK(micro < n, "problem '", problem_.name(), "': loss(", micro, ") but the accumulation ",
            "window holds ", n, " batch(es)");
  const at::Tensor value = loss(window.empty() ? problem_.current_batch_ : window[micro]);
  return n == 1 ? value : value / static_cast<double>(n);
}

at::Tensor LevelRuntime::loss(const Batch& batch) {
  return evaluate(batch, LossCall::kReevaluation);
}

at::Tensor LevelRuntime::evaluate(const Batch& batch, LossCall call) {
  // NOTE: the previous call comes back also when training_step throws, and after a nested call
  // (another problem's step may re-evaluate this one's loss while this one is idle).
  const auto restore = c10::make_scope_exit([this, saved = problem_.call_] {
    problem_.call_ = saved;
  });
  problem_.call_ = call;
  memory::AutocastGuard autocast(problem_.config().precision(), device_.type());
  if (call != LossCall::kReevaluation || upper_only_ == nullptr) {
    return problem_.training_step(batch);
  }
  // A method that differentiates this re-evaluation with respect to `upper_only_`'s parameters
  // alone: this problem's own parameters take no gradient, so its forward keeps no graph, and
  // casts without history are not cached (memory/precision.h).
  std::vector<at::Tensor> off;
  const auto& upper = upper_only_->parameters();
  for (const auto& t : trainable_) {
    const bool shared = std::any_of(upper.begin(), upper.end(), [&](const at::Tensor& u) {
      return u.unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
    });
    if (!shared && t.requires_grad()) off.push_back(t);
  }
  const auto back_on = c10::make_scope_exit([&off] {
    for (auto& t : off) t.requires_grad_(true);
  });
  for (auto& t : off) t.requires_grad_(false);
  memory::CastCacheOff no_cache;
  return problem_.training_step(batch);
}

void LevelRuntime::mean_gradient(const std::vector<at::Tensor>& grads, const Level& of) const {
  // NOTE: a sharded level's gradients were reduce-scattered by the backward of each unit, over
  // the same ranks; had this problem opted out, its loss is the same on every rank, whose mean
  // is itself.
  if (!of.shards_parameters()) mean(grads);
}

void LevelRuntime::step(const StepContext& context) {
  Problem& p = problem_;
  method_ = context.method;
  global_step_ = context.global_step;
  const auto restore = c10::make_scope_exit([&p, saved = p.call_] { p.call_ = saved; });
  p.call_ = LossCall::kOwnStep;
  if (context.redo) {
    // Rewind to the state before this unroll and redo one step on the same batch, now with the
    // updated parents.
    const Batch batch = p.current_batch_;
    p.restore_state();
    descend(context, &batch);
    return;
  }
  if (context.unroll_start) {
    p.on_inner_loop_start();
    if (p.config().roll_back()) p.cache_state();
    if (method_) method_->on_unroll_start(*this);
  }
  if (p.training_) ++p.step_count_;
  descend(context, nullptr);
}

void LevelRuntime::descend(const StepContext& context, const Batch* batch) {
  using memory::MemoryMeter;
  using memory::Phase;
  using memory::to_string;
  Problem& p = problem_;
  const std::string& name = p.name();
  const std::vector<Path>* paths = context.paths;
  auto whole = MemoryMeter::scope(meter_, name, "total");
  {
    auto scope = MemoryMeter::scope(meter_, name, to_string(Phase::kData));
    if (batch != nullptr) {
      p.current_batch_ = *batch;
    } else {
      p.current_batch_ = p.stream_ ? p.stream_->next().to(device_) : Batch();
    }
    // A new accumulation window starts after every optimizer step.
    if (p.window_.size() >= static_cast<size_t>(p.config().gradient_accumulation())) {
      p.window_.clear();
    }
    p.window_.push_back(p.current_batch_);
  }
  // Only this problem's own training step may write buffers (running statistics): whatever this
  // step's passes write into other problems' buffers is undone when it ends.
  detail::BufferSnapshot peers(peer_buffers_);
  p.metrics_.clear();
  at::Tensor value;
  {
    auto scope = MemoryMeter::scope(meter_, name, to_string(Phase::kForward));
    value = evaluate(p.current_batch_, LossCall::kOwnStep);
  }
  MLO_CHECK(value.defined() && value.numel() == 1, "problem '", name,
            "': training_step must return a scalar loss, got ",
            value.defined() ? c10::str(value.sizes()) : std::string("an undefined tensor"));
  MLO_CHECK(value.requires_grad(), "problem '", name,
            "': the loss does not depend on any parameter that requires gradients");
  if (context.inputs != nullptr) {
    check_inputs(value, paths != nullptr && !paths->empty(), *context.inputs);
  }
  p.last_loss_ = value.item<double>();
  p.metrics_["loss"] = p.last_loss_;
  // Accumulation averages micro-batches; the loss scale (if any) is removed before the step.
  at::Tensor scaled = value;
  if (p.config().gradient_accumulation() > 1) {
    scaled = scaled / static_cast<double>(p.config().gradient_accumulation());
  }
  if (p.scaler_) scaled = p.scaler_->scale(scaled);
  {
    // The forward above was this problem's own training step; the hypergradient passes that
    // follow re-run lower losses (which may read this problem's module) and must leave this
    // problem's buffers as the forward left them.
    static const std::vector<Path> kNoPaths;
    const auto& all = paths ? *paths : kNoPaths;
    detail::BufferSnapshot own(all.empty() ? std::vector<at::Tensor>() : own_buffers_);
    accumulate(gradients(scaled, all));
  }
  if (p.step_count_ % p.config().gradient_accumulation() == 0) {
    auto scope = MemoryMeter::scope(meter_, name, to_string(Phase::kStep));
    optimizer_step();
  }
  record_step_metrics(whole.close());
}

std::vector<at::Tensor> LevelRuntime::gradients(const at::Tensor& loss,
                                                const std::vector<Path>& paths) {
  Problem& p = problem_;
  const std::string& name = p.name();
  const std::vector<at::Tensor>& own = trainable_;
  // One backward pass gives the direct gradient and v = dL/dw for the first lower problem of
  // every path (several paths may start with the same lower problem).
  std::vector<Level*> lowers;
  for (const auto& path : paths) {
    if (std::find(lowers.begin(), lowers.end(), &path.first()) == lowers.end()) {
      lowers.push_back(&path.first());
    }
  }
  std::vector<at::Tensor> inputs = own;
  std::vector<size_t> offsets;
  for (Level* lower : lowers) {
    offsets.push_back(inputs.size());
    for (const auto& t : lower->parameters()) inputs.push_back(t);
  }
  MLO_CHECK(!inputs.empty(), "problem '", name, "' has no trainable parameters");
  std::vector<at::Tensor> grads;
  {
    auto scope =
        memory::MemoryMeter::scope(meter_, name, memory::to_string(memory::Phase::kBackward));
    grads = torch::autograd::grad({loss}, inputs, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  }
  // NOTE: a parameter of a level whose gradient is its own loss's alone, and that the loss
  // does not reach, would train with a silent zero gradient (a weight cast cached without
  // history under autocast did exactly that): an error unless the level accepts it. An upper
  // level's parameters may enter only through its paths, and an upper loss may not reach every
  // parameter of a lower level (one head of a multi-task model): zero is then exact.
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) continue;
    MLO_CHECK(i >= own.size() || !paths.empty() || p.config().allow_unused_parameters(),
              "problem '", name, "': its loss does not depend on its parameter '",
              p.parameter_name(inputs[i]),
              "', which requires grad; set requires_grad false on it before Engine::initialize if ",
              "it is meant to stay fixed, or allow_unused_parameters if some batches do not use it");
    grads[i] = at::zeros_like(inputs[i]);
  }
  std::vector<at::Tensor> total(grads.begin(), grads.begin() + static_cast<long>(own.size()));
  std::vector<at::Tensor> hyper(total.size());
  auto scope =
      memory::MemoryMeter::scope(meter_, name, memory::to_string(memory::Phase::kHypergradient));
  for (const auto& path : paths) {
    MLO_INTERNAL_ASSERT(&path.last() == this, "path ", path.describe(), " does not return to ",
                        name);
    const size_t index = static_cast<size_t>(
        std::find(lowers.begin(), lowers.end(), &path.first()) - lowers.begin());
    const auto begin = grads.begin() + static_cast<long>(offsets[index]);
    std::vector<at::Tensor> v(begin, begin + static_cast<long>(path.first().parameters().size()));
    // Under data parallelism v is this rank's shard's: the global batch's v is their mean, and
    // every hop must start from it (docs/distributed.md).
    mean_gradient(v, path.first());
    Level& first = path.first();
    const auto* first_runtime = static_cast<const LevelRuntime*>(&first);
    if (!first_runtime->sync_->finite_everywhere(detail::all_finite(v))) {
      // An overflow of the (scaled) loss: no method can use this vector. The whole accumulation
      // window is skipped at the optimizer step, where the loss scaler backs off and counts it.
      MLO_CHECK(p.scaler_, "problem '", name, "': the gradient of its loss with respect to the ",
                "parameters of problem '", first.name(), "' is not finite (loss ", p.last_loss_,
                ") at global step ", global_step_, "; lower the learning rate, or enable loss ",
                "scaling to skip such steps");
      p.nonfinite_window_ = true;
      break;
    }
    v = path.propagate(std::move(v));
    MLO_INTERNAL_ASSERT(v.size() == total.size(), "hypergradient size mismatch for ", name);
    if (!sync_->finite_everywhere(detail::all_finite(v))) {
      // A hop overflowed on the way (e.g. a low-precision re-evaluation): the same rule.
      MLO_CHECK(p.scaler_, "problem '", name, "': the hypergradient along ", path.describe(),
                " is not finite at global step ", global_step_, "; lower the learning rate, or ",
                "enable loss scaling to skip such steps");
      p.nonfinite_window_ = true;
      break;
    }
    if (hypergradients_ == 0) {
      // (the first hypergradient: a result that is exactly zero may be a link written the
      // wrong way round, which the graph's edges alone do not show when each loss reads the
      // other's parameters)
      if (sum_over_shards(local_squares(v)) == 0) check_zero_path(path);
    }
    for (const Hop& hop : path.hops()) {
      for (const auto& [key, value] : hop.method->diagnostics()) {
        p.metrics_["hypergrad/" + metric_segment(hop.curr->name()) + "/" + key] = value;
      }
    }
    for (size_t i = 0; i < total.size(); ++i) {
      total[i] = total[i] + v[i];
      hyper[i] = hyper[i].defined() ? hyper[i] + v[i] : v[i];
    }
  }
  if (!paths.empty() && !p.nonfinite_window_) {
    // The hypergradient alone (every path's sum, without the direct gradient) of this step's
    // loss: without the loss scale and the accumulation window's 1/G that `loss` carries.
    double factor = static_cast<double>(p.config().gradient_accumulation());
    if (p.scaler_) factor /= p.scaler_->scale();
    const double norm = factor * std::sqrt(sum_over_shards(local_squares(hyper)));
    p.metrics_["hypergrad/norm"] = norm;
    ++hypergradients_;
    if (norm == 0 && zero_hypergradients_ == hypergradients_ - 1 &&
        ++zero_hypergradients_ == kZeroHypergradientSteps) {
      std::string through;
      for (const Level* lower : lowers) {
        through += (through.empty() ? "'" : ", '") + lower->name() + "'";
      }
      spdlog::warn("problem '{}': its hypergradient (through {}) was exactly 0 at each of its "
                   "first {} steps: its parameters reach the losses below, but the gradients "
                   "there do not change with them at these values (e.g. a parameter that starts "
                   "where its effect is zero), so it trains on its own loss's gradient alone",
                   name, through, kZeroHypergradientSteps);
    }
  }
  return total;
}

void LevelRuntime::accumulate(std::vector<at::Tensor> grads) {
  // ZeRO-2: every micro-step's gradients go to their owners at once; a rank holds its shard.
  // (ZeRO-3: the units' backward did so already.)
  sync_->micro_step(grads);
  std::vector<at::Tensor> params = trainable_;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    at::Tensor& grad = params[i].mutable_grad();
    if (grad.defined()) {
      grad.add_(grads[i]);
    } else {
      grad = grads[i].detach();
    }
  }
}

void LevelRuntime::optimizer_step() {
  Problem& p = problem_;
  std::vector<at::Tensor> params = trainable_;
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& t : params) grads.push_back(t.grad());
  // Data parallel: the global batch's gradients (direct and hypergradient), once per
  // accumulation window.
  sync_->window_end(grads);
  if (p.scaler_) {
    const bool finite = sync_->all_finite(p.scaler_->unscale(grads) && !p.nonfinite_window_);
    p.nonfinite_window_ = false;
    p.scaler_->update(finite);
    if (!finite) {
      // Skipped step: no update, no schedule advance; the scale has backed off.
      for (auto& t : params) t.mutable_grad().reset();
      return;
    }
  }
  p.grad_callback(grads);
  for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
  if (p.config().gradient_clipping() > 0) sync_->clip(params, p.config().gradient_clipping());
  if (method_) {
    // (a method may evaluate this problem's loss here, forward: as a re-evaluation, its
    // buffers stay as the step's own forward left them)
    detail::BufferSnapshot own(own_buffers_);
    method_->before_optimizer_step(*this);
  }
  sync_->before_step(params);
  if (!p.custom_optimizer_step()) p.optimizer().step();
  sync_->after_step(params, own_buffers_);
  ++p.optimizer_steps_;
  p.apply_schedule();
  p.param_callback();
  for (auto& t : params) t.mutable_grad().reset();
}

void LevelRuntime::record_step_metrics(int64_t peak_bytes) {
  Problem& p = problem_;
  if (p.optimizer_ && !p.optimizer_->param_groups().empty()) {
    p.metrics_["lr"] = p.optimizer_->param_groups().front().options().get_lr();
  }
  if (meter_) p.metrics_["mem_peak_mb"] = memory::to_mib(peak_bytes);
  if (p.scaler_) {
    // Dynamic loss scaling: where the scale stands and how many windows it has skipped, so a
    // run whose fp16 level keeps overflowing (or whose first steps were dropped) says so.
    p.metrics_["loss_scale"] = p.scaler_->scale();
    p.metrics_["skipped_steps"] = static_cast<double>(p.scaler_->skipped_steps());
  }
}

}  // namespace detail
}  // namespace mlo
