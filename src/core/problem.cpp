#include <mlo/core/problem.h>

#include "all_finite.h"
#include "buffer_snapshot.h"
#include "data_parallel.h"
#include "reach.h"
#include "zero3.h"

#include <mlo/dist/process_group.h>
#include <mlo/core/method.h>
#include <mlo/core/path.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>

#include <c10/util/ScopeExit.h>
#include <torch/autograd.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/serialize/archive.h>

#include <algorithm>

namespace mlo {

Problem::Problem(std::string name, ProblemConfig config)
    : name_(std::move(name)), config_(std::move(config)) {
  MLO_CHECK(!name_.empty(), "a problem needs a non-empty name");
}

Problem::~Problem() = default;

Problem& Problem::module(std::shared_ptr<torch::nn::Module> module) {
  MLO_CHECK(module != nullptr, "problem '", name_, "': module(...) got a null module");
  module_ = std::move(module);
  module_->train(training_);
  return *this;
}

Problem& Problem::optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  MLO_CHECK(optimizer != nullptr, "problem '", name_, "': optimizer(...) got a null optimizer");
  optimizer_ = std::move(optimizer);
  if (schedule_) scheduler(schedule_);  // re-capture the base learning rates
  return *this;
}

Problem& Problem::scheduler(LrSchedule schedule) {
  MLO_CHECK(static_cast<bool>(schedule), "problem '", name_,
            "': scheduler(...) got an empty function");
  MLO_CHECK(optimizer_, "problem '", name_, "': set the optimizer before the scheduler");
  schedule_ = std::move(schedule);
  base_lrs_.clear();
  for (const auto& group : optimizer_->param_groups())
    base_lrs_.push_back(group.options().get_lr());
  apply_schedule();
  return *this;
}

Problem& Problem::data(std::shared_ptr<BatchStream> stream) {
  MLO_CHECK(stream != nullptr, "problem '", name_, "': data(...) got a null stream");
  stream_ = std::move(stream);
  return *this;
}

Problem& Problem::data(std::vector<Batch> batches) {
  MLO_CHECK(!batches.empty(), "problem '", name_, "': data(...) got no batches");
  return data(std::make_shared<VectorStream>(std::move(batches)));
}

Problem& Problem::data(std::function<Batch()> next_batch) {
  return data(std::make_shared<FunctionStream>(std::move(next_batch)));
}

torch::nn::Module& Problem::module() const {
  MLO_CHECK(module_, "problem '", name_, "' has no module; call module(...) first");
  return *module_;
}

torch::optim::Optimizer& Problem::optimizer() const {
  MLO_CHECK(optimizer_, "problem '", name_, "' has no optimizer; call optimizer(...) first");
  return *optimizer_;
}

std::vector<at::Tensor> Problem::parameters() const {
  if (resolved_) return trainable_;
  std::vector<at::Tensor> out;
  if (!module_) return out;
  for (const auto& p : module_->parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

at::Tensor Problem::current_loss() {
  const size_t n = window_.empty() ? 1 : window_.size();
  at::Tensor total = current_loss(0);
  for (size_t i = 1; i < n; ++i) total = total + current_loss(i);
  return total;
}

at::Tensor Problem::current_loss(size_t micro) {
  const size_t n = window_.empty() ? 1 : window_.size();
  MLO_CHECK(micro < n, "problem '", name_, "': current_loss(", micro, ") but the accumulation ",
            "window holds ", n, " batch(es)");
  const at::Tensor value = loss(window_.empty() ? current_batch_ : window_[micro]);
  return n == 1 ? value : value / static_cast<double>(n);
}

at::Tensor Problem::loss(const Batch& batch) { return evaluate(batch, LossCall::kReevaluation); }

at::Tensor Problem::evaluate(const Batch& batch, LossCall call) {
  // NOTE: the previous call comes back also when training_step throws, and after a nested call
  // (another problem's step may re-evaluate this one's loss while this one is idle).
  const auto restore = c10::make_scope_exit([this, saved = call_] { call_ = saved; });
  call_ = call;
  memory::AutocastGuard autocast(config_.precision(), device_.type());
  return training_step(batch);
}

c10::Device Problem::device() const {
  if (resolved_ || !module_) return device_;
  const auto params = module_->parameters();
  return params.empty() ? c10::Device(c10::kCPU) : params.front().device();
}

void Problem::resolve(memory::MemoryMeter* meter, const std::vector<Problem*>& peers,
                      std::shared_ptr<dist::ProcessGroup> group_owner, dist::Strategy strategy) {
  dist::ProcessGroup* group = group_owner.get();
  meter_ = meter;
  resolved_ = false;  // (a second resolve lists the parameters afresh)
  trainable_ = parameters();
  resolved_ = true;
  const bool sharded = group != nullptr && config_.data_parallel();
  group_ = sharded ? group : nullptr;
  replicas_ = sharded ? nullptr : group;
  {
    const auto params = module().parameters();
    device_ = params.empty() ? c10::Device(c10::kCPU) : params.front().device();
  }
  auto* chain = dynamic_cast<nn::ChainImpl*>(module_.get());
  if (sharded && strategy == dist::Strategy::kZero3 && chain != nullptr) {
    // (a second resolve keeps the shards: the module's parameters hold no values any more)
    if (!zero3_) {
      zero3_ = std::make_unique<detail::Zero3>(*chain, optimizer_.get(), group_owner, name_,
                                               config_.offload() == Offload::kCpu);
    }
    MLO_CHECK(&zero3_->group() == group, "problem '", name_, "': its parameters are sharded over ",
              "another process group (an earlier engine's); a problem sharded by zero3 stays ",
              "with its group");
    trainable_ = zero3_->shards();
  } else {
    MLO_CHECK(!zero3_, "problem '", name_, "': its parameters are sharded by strategy zero3; ",
              "resolve it again with zero3 and the same group");
  }
  // (zero3 on a module that is no Chain: zero2, the parameters replicated; a sharded Chain's
  // gradients arrive averaged, and the rest of data parallelism is distributed's)
  const dist::Strategy served = zero3_ ? dist::Strategy::kDistributed : strategy;
  parallel_ = sharded ? std::make_unique<detail::DataParallel>(*group, served, trainable_, device_)
                      : nullptr;
  own_buffers_ = module().buffers();
  peer_buffers_.clear();
  for (const Problem* peer : peers) {
    if (peer == this || !peer->module_) continue;
    for (const auto& b : peer->module_->buffers()) {
      // A buffer this problem shares with a peer (a shared backbone) is its own: its own step
      // updates it.
      const bool shared = std::any_of(own_buffers_.begin(), own_buffers_.end(), [&](const at::Tensor& o) {
        return o.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
      });
      if (!shared) peer_buffers_.push_back(b);
    }
  }
  std::optional<LossScaling> scaling = config_.loss_scaling();
  if (!scaling && config_.precision() == Precision::kFP16) scaling = LossScaling();
  scaler_ = scaling ? std::make_unique<memory::LossScaler>(*scaling) : nullptr;
}

std::string Problem::parameter_name(const at::Tensor& parameter) const {
  if (zero3_) {
    std::string shard = zero3_->describe(parameter);
    if (!shard.empty()) return shard;
  }
  if (module_) {
    for (const auto& item : module_->named_parameters()) {
      if (item.value().unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return item.key();
    }
  }
  return "(unnamed)";
}

memory::Footprint Problem::footprint() const {
  memory::Footprint f = memory::footprint(module(), optimizer_ ? optimizer_.get() : nullptr);
  if (zero3_) {
    // (the module's sharded parameters are empty between uses; the shards hold the values)
    f.parameters += zero3_->shard_bytes();
    for (const auto& s : trainable_) {
      if (s.grad().defined()) f.gradients += s.grad().numel() * s.grad().element_size();
    }
  }
  return f;
}

void Problem::train(bool on) {
  training_ = on;
  if (module_) module_->train(on);
}

void Problem::step(const StepContext& context) {
  method_ = context.method;
  const auto restore = c10::make_scope_exit([this, saved = call_] { call_ = saved; });
  call_ = LossCall::kOwnStep;
  if (context.redo) {
    // Rewind to the state before this unroll and redo one step on the same batch, now with the
    // updated parents.
    const Batch batch = current_batch_;
    restore_state();
    descend(context.paths, &batch);
    return;
  }
  if (context.unroll_start) {
    on_inner_loop_start();
    if (config_.roll_back()) cache_state();
    if (method_) method_->on_unroll_start(*this);
  }
  if (training_) ++step_count_;
  descend(context.paths, nullptr, context.inputs);
}

void Problem::check_inputs(const at::Tensor& loss, bool has_paths,
                           const std::vector<std::pair<const Problem*, bool>>& inputs) const {
  for (const auto& [input, upper] : inputs) {
    if (detail::reaches(loss, input->parameters())) continue;
    throw Error(
        "problem '" + name_ + "': its loss does not depend on the parameters of problem '" +
        input->name() + "', though the dependency graph says it does (" +
        (upper ? "u2l " + input->name() + " -> " + name_ + ": the upper's parameters enter the "
                                                           "lower's loss"
               : "l2u " + input->name() + " -> " + name_ + ": the lower's parameters enter the "
                                                           "upper's loss") +
        "); check the order of link(upper, lower)'s arguments, or remove the edge");
  }
  // A problem without hypergradient paths trains on its own loss's gradient alone: a loss that
  // reaches none of its parameters would train nothing (a lower problem linked as an upper one).
  if (!has_paths && !config_.allow_unused_parameters() && !trainable_.empty() &&
      !detail::reaches(loss, trainable_)) {
    const bool lower = std::any_of(inputs.begin(), inputs.end(),
                                   [](const auto& input) { return input.second; });
    throw Error("problem '" + name_ + "': its loss does not depend on any of its own trainable "
                "parameters, so its steps would change nothing" +
                std::string(lower ? "; as a lower problem (one with a problem above it) its loss "
                                    "must; check the order of link(upper, lower)'s arguments"
                                  : ""));
  }
}

void Problem::descend(const std::vector<Path>* paths, const Batch* batch,
                      const std::vector<std::pair<const Problem*, bool>>* inputs) {
  using memory::MemoryMeter;
  using memory::Phase;
  using memory::to_string;
  auto whole = MemoryMeter::scope(meter_, name_, "total");
  {
    auto scope = MemoryMeter::scope(meter_, name_, to_string(Phase::kData));
    if (batch != nullptr) {
      current_batch_ = *batch;
    } else {
      current_batch_ = stream_ ? stream_->next().to(device_) : Batch();
    }
    // A new accumulation window starts after every optimizer step.
    if (window_.size() >= static_cast<size_t>(config_.gradient_accumulation())) window_.clear();
    window_.push_back(current_batch_);
  }
  // Only this problem's own training step may write buffers (running statistics): whatever this
  // step's passes write into other problems' buffers is undone when it ends.
  detail::BufferSnapshot peers(peer_buffers_);
  metrics_.clear();
  at::Tensor value;
  {
    auto scope = MemoryMeter::scope(meter_, name_, to_string(Phase::kForward));
    value = evaluate(current_batch_, LossCall::kOwnStep);
  }
  MLO_CHECK(value.defined() && value.numel() == 1, "problem '", name_,
            "': training_step must return a scalar loss, got ",
            value.defined() ? c10::str(value.sizes()) : std::string("an undefined tensor"));
  MLO_CHECK(value.requires_grad(), "problem '", name_,
            "': the loss does not depend on any parameter that requires gradients");
  if (inputs != nullptr) check_inputs(value, paths != nullptr && !paths->empty(), *inputs);
  last_loss_ = value.item<double>();
  metrics_["loss"] = last_loss_;
  // Accumulation averages micro-batches; the loss scale (if any) is removed before the step.
  at::Tensor scaled = value;
  if (config_.gradient_accumulation() > 1) {
    scaled = scaled / static_cast<double>(config_.gradient_accumulation());
  }
  if (scaler_) scaled = scaler_->scale(scaled);
  {
    // The forward above was this problem's own training step; the hypergradient passes that
    // follow re-run lower losses (which may read this problem's module) and must leave this
    // problem's buffers as the forward left them.
    static const std::vector<Path> kNoPaths;
    const auto& all = paths ? *paths : kNoPaths;
    detail::BufferSnapshot own(all.empty() ? std::vector<at::Tensor>() : own_buffers_);
    accumulate(gradients(scaled, all));
  }
  if (step_count_ % config_.gradient_accumulation() == 0) {
    auto scope = MemoryMeter::scope(meter_, name_, to_string(Phase::kStep));
    optimizer_step();
  }
  record_step_metrics(whole.close());
}

std::vector<at::Tensor> Problem::gradients(const at::Tensor& loss,
                                           const std::vector<Path>& paths) {
  const std::vector<at::Tensor>& own = trainable_;
  // One backward pass gives the direct gradient and v = dL/dw for the first lower problem of
  // every path (several paths may start with the same lower problem).
  std::vector<Problem*> lowers;
  for (const auto& path : paths) {
    if (std::find(lowers.begin(), lowers.end(), &path.first()) == lowers.end()) {
      lowers.push_back(&path.first());
    }
  }
  std::vector<at::Tensor> inputs = own;
  std::vector<size_t> offsets;
  for (Problem* lower : lowers) {
    offsets.push_back(inputs.size());
    for (const auto& p : lower->parameters()) inputs.push_back(p);
  }
  MLO_CHECK(!inputs.empty(), "problem '", name_, "' has no trainable parameters");
  std::vector<at::Tensor> grads;
  {
    auto scope =
        memory::MemoryMeter::scope(meter_, name_, memory::to_string(memory::Phase::kBackward));
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
    MLO_CHECK(i >= own.size() || !paths.empty() || config_.allow_unused_parameters(), "problem '",
              name_, "': its loss does not depend on its parameter '", parameter_name(inputs[i]),
              "', which requires grad; set requires_grad false on it before Engine::initialize if ",
              "it is meant to stay fixed, or allow_unused_parameters if some batches do not use it");
    grads[i] = at::zeros_like(inputs[i]);
  }
  std::vector<at::Tensor> total(grads.begin(), grads.begin() + static_cast<long>(own.size()));
  auto scope =
      memory::MemoryMeter::scope(meter_, name_, memory::to_string(memory::Phase::kHypergradient));
  for (const auto& path : paths) {
    MLO_INTERNAL_ASSERT(&path.last() == this, "path ", path.describe(), " does not return to ",
                        name_);
    const size_t index = static_cast<size_t>(
        std::find(lowers.begin(), lowers.end(), &path.first()) - lowers.begin());
    const auto begin = grads.begin() + static_cast<long>(offsets[index]);
    std::vector<at::Tensor> v(begin, begin + static_cast<long>(path.first().parameters().size()));
    // Under data parallelism v is this rank's shard's: the global batch's v is their mean, and
    // every hop must start from it (docs/distributed.md).
    mean_gradient(v, path.first());
    if (!finite_everywhere(v, path.first())) {
      // An overflow of the (scaled) loss: no method can use this vector. The whole accumulation
      // window is skipped at the optimizer step, where the loss scaler backs off and counts it.
      MLO_CHECK(scaler_, "problem '", name_, "': the gradient of its loss with respect to the ",
                "parameters of problem '", path.first().name(), "' is not finite (loss ",
                last_loss_, "); lower the learning rate, or enable loss scaling to skip such steps");
      nonfinite_window_ = true;
      break;
    }
    v = path.propagate(std::move(v));
    MLO_INTERNAL_ASSERT(v.size() == total.size(), "hypergradient size mismatch for ", name_);
    if (!finite_everywhere(v, *this)) {
      // A hop overflowed on the way (e.g. a low-precision re-evaluation): the same rule.
      MLO_CHECK(scaler_, "problem '", name_, "': the hypergradient along ", path.describe(),
                " is not finite; lower the learning rate, or enable loss scaling to skip such "
                "steps");
      nonfinite_window_ = true;
      break;
    }
    for (size_t i = 0; i < total.size(); ++i) total[i] = total[i] + v[i];
  }
  return total;
}

void Problem::accumulate(std::vector<at::Tensor> grads) {
  // ZeRO-2: every micro-step's gradients go to their owners at once; a rank holds its shard.
  // (ZeRO-3: the units' backward did so already.)
  if (parallel_ && parallel_->shards_gradients()) parallel_->reduce_scatter(grads);
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

void Problem::optimizer_step() {
  std::vector<at::Tensor> params = trainable_;
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.grad());
  // Data parallel: the mean over the ranks of the accumulated gradients (direct and
  // hypergradient), once per accumulation window. (ZeRO-2 reduced them at every micro-step.)
  // (ZeRO-3: the units' backward averaged them, shard by shard.)
  const bool partial = parallel_ && (parallel_->shards_gradients() || zero3_);
  if (parallel_ && !partial) parallel_->all_reduce(grads);
  if (scaler_) {
    bool finite = scaler_->unscale(grads) && !nonfinite_window_;
    if (partial) finite = parallel_->all_finite(finite);
    nonfinite_window_ = false;
    scaler_->update(finite);
    if (!finite) {
      // Skipped step: no update, no schedule advance; the scale has backed off.
      for (auto& p : params) p.mutable_grad().reset();
      return;
    }
  }
  grad_callback(grads);
  for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
  if (config_.gradient_clipping() > 0) {
    if (partial) {
      parallel_->clip(params, config_.gradient_clipping());
    } else {
      torch::nn::utils::clip_grad_norm_(params, config_.gradient_clipping());
    }
  }
  if (method_) method_->before_optimizer_step(*this);
  if (parallel_ && parallel_->shards_optimizer()) parallel_->drop_unowned(params);
  if (!custom_optimizer_step()) optimizer().step();
  if (parallel_) {
    if (parallel_->shards_optimizer()) parallel_->gather(params);
    parallel_->sync_buffers(own_buffers_);
  } else if (replicas_ != nullptr) {
    std::vector<at::Tensor> state = params;
    state.insert(state.end(), own_buffers_.begin(), own_buffers_.end());
    replicas_->broadcast(state, /*root=*/0);
  }
  ++optimizer_steps_;
  apply_schedule();
  param_callback();
  for (auto& p : params) p.mutable_grad().reset();
}

void Problem::apply_schedule() {
  if (!schedule_ || !optimizer_) return;
  const double factor = schedule_(optimizer_steps_);
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    groups[i].options().set_lr(base_lrs_[i] * factor);
  }
}

}  // namespace mlo
