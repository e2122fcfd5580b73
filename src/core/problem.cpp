#include <mlo/core/problem.h>

#include "level_runtime.h"
#include "dist/zero3.h"

#include <mlo/memory/precision.h>

#include <torch/serialize/archive.h>

#include <algorithm>

namespace mlo {

Problem::Problem(std::string name, ProblemConfig config)
    : name_(std::move(name)), config_(std::move(config)) {
  MLO_CHECK(!name_.empty(), "a problem needs a non-empty name");
}

Problem::~Problem() {
  // (a copy: each handle leaves the list as it is unlinked)
  const std::vector<detail::HandleBase*> linked = linked_from_;
  for (detail::HandleBase* handle : linked) handle->target_destroyed(name_);
}

std::vector<at::Tensor> Problem::full_parameters() const {
  std::vector<at::Tensor> out;
  if (!module_) return out;
  std::vector<std::pair<const void*, at::Tensor>> gathered;
  if (zero3_) gathered = zero3_->gather_copies();
  for (const auto& p : module_->parameters()) {
    if (!p.requires_grad()) continue;
    const auto it = std::find_if(gathered.begin(), gathered.end(), [&](const auto& entry) {
      return entry.first == p.unsafeGetTensorImpl();
    });
    out.push_back(it != gathered.end() ? it->second : p.detach().clone());
  }
  return out;
}

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

const Batch& Problem::current_batch() const {
  MLO_CHECK(step_count_ > 0 || !window_.empty(), "problem '", name_,
            "': current_batch() before its first step: it has drawn no batch yet (the engine ",
            "steps a problem's lower levels before it, so read a lower problem's batch from an ",
            "upper loss, not the other way round)");
  return current_batch_;
}

std::vector<at::Tensor> Problem::parameters() const {
  if (runtime_) return runtime_->parameters();
  // (sharded by an engine that is gone: the shards hold the values)
  if (zero3_) return zero3_->shards();
  std::vector<at::Tensor> out;
  if (!module_) return out;
  for (const auto& p : module_->parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

double squared_norm(const Problem& problem, const std::vector<at::Tensor>& vector) {
  double local = 0;
  for (const auto& t : vector) {
    if (t.defined()) local += t.detach().pow(2).sum(at::kDouble).item<double>();
  }
  const detail::LevelRuntime* runtime = detail::runtime_of(problem);
  return runtime != nullptr ? runtime->sum_over_shards(local) : local;
}

c10::Device Problem::device() const {
  if (runtime_) return runtime_->device();
  if (!module_) return c10::Device(c10::kCPU);
  const auto params = module_->parameters();
  return params.empty() ? c10::Device(c10::kCPU) : params.front().device();
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
    for (const auto& s : parameters()) {
      if (s.grad().defined()) f.gradients += s.grad().numel() * s.grad().element_size();
    }
  }
  return f;
}

void Problem::train(bool on) {
  training_ = on;
  if (module_) module_->train(on);
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
