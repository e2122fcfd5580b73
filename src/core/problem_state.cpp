// Problem's state: what `state_dict` saves for resume and what roll-back snapshots and restores
// (the stepping itself is in problem.cpp).
#include <mlo/core/problem.h>

#include "dist/zero3.h"

#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/memory/precision.h>

#include <torch/serialize/archive.h>

#include <sstream>
#include <string>
#include <utility>

namespace mlo {
namespace {

// The optimizer's state as `archive` has it, and nothing else. NOTE: LibTorch's
// `Optimizer::load` only overwrites the entries the archive holds: a snapshot taken before the
// first step (no momentum buffers, Adam moments or step counts yet) would leave the state of
// the steps taken since in place.
void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  optimizer.state().clear();
  optimizer.load(archive);
}

// "[6, 1]".
std::string shape_text(const at::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

// Refuses a saved tensor whose shape differs from the module's: LibTorch's `Module::load`
// would take it in place of the module's own (Tensor::set_), and the run would fail later, in
// a forward, with no name. `path`: the submodule's dotted name ("" for the module itself).
void check_shapes(const torch::nn::Module& module, torch::serialize::InputArchive& archive,
                  const std::string& owner, const std::string& path) {
  const auto check = [&](const std::string& key, const at::Tensor& current, bool is_buffer) {
    at::Tensor saved;
    if (!current.defined() || !archive.try_read(key, saved, is_buffer)) return;
    MLO_CHECK(saved.sizes() == current.sizes(), owner, ": ", is_buffer ? "buffer" : "parameter",
              " '", path.empty() ? key : path + "." + key, "' is ", shape_text(current),
              " in this run but ", shape_text(saved), " in the saved state (was the ",
              "configuration changed since it was saved, e.g. a model's size?)");
  };
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    check(item.key(), item.value(), false);
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    check(item.key(), item.value(), true);
  }
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive sub;
    if (archive.try_read(child.key(), sub)) {
      check_shapes(*child.value(), sub, owner, path.empty() ? child.key() : path + "." + child.key());
    }
  }
}

// Under zero3 the module's sharded parameters are empty: the values are this rank's shards.
void save_shards(const std::vector<at::Tensor>& shards, torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive out;
  out.write("count", c10::IValue(static_cast<int64_t>(shards.size())));
  for (size_t i = 0; i < shards.size(); ++i) {
    out.write(std::to_string(i), shards[i].detach(), /*is_buffer=*/true);
  }
  archive.write("zero3_shards", out);
}

void load_shards(const std::vector<at::Tensor>& shards, torch::serialize::InputArchive& archive,
                 const std::string& owner) {
  torch::serialize::InputArchive in;
  MLO_CHECK(archive.try_read("zero3_shards", in), owner, ": the saved state holds no zero3 ",
            "shards (saved under another strategy)");
  const int64_t count = mlo::archive::read_int(in, "count", owner);
  MLO_CHECK(count == static_cast<int64_t>(shards.size()), owner, ": the saved state holds ",
            count, " zero3 shards, this run ", shards.size());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < shards.size(); ++i) {
    at::Tensor value;
    in.read(std::to_string(i), value, /*is_buffer=*/true);
    MLO_CHECK(value.numel() == shards[i].numel(), owner, ": zero3 shard ", i, " was saved with ",
              value.numel(), " elements, this run's has ", shards[i].numel(),
              " (another number of ranks)");
    shards[i].detach().copy_(value.view_as(shards[i]));
  }
}

}  // namespace

void Problem::state_dict(torch::serialize::OutputArchive& archive) const {
  torch::serialize::OutputArchive module_archive;
  module().save(module_archive);
  archive.write("module", module_archive);
  if (zero3_) save_shards(zero3_->shards(), archive);
  if (optimizer_) {
    torch::serialize::OutputArchive optimizer_archive;
    optimizer_->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  if (stream_) {
    torch::serialize::OutputArchive data_archive;
    stream_->save(data_archive);
    archive.write("data", data_archive);
  }
  archive.write("step_count", c10::IValue(step_count_));
  archive.write("optimizer_steps", c10::IValue(optimizer_steps_));
  // The latest step's metrics, so logs after a resume read as without the interruption.
  std::string names;
  std::vector<double> values;
  for (const auto& [name, value] : metrics_) {
    names += name + '\n';
    values.push_back(value);
  }
  archive.write("metric_names", c10::IValue(names));
  archive.write("metric_values", c10::IValue(values));
  archive.write("last_loss", c10::IValue(last_loss_));
  if (scaler_) {
    torch::serialize::OutputArchive scaler_archive;
    scaler_->save(scaler_archive);
    archive.write("loss_scaler", scaler_archive);
  }
  // The batches a parent re-evaluates this problem's loss on (its latest accumulation window):
  // after a resume, a parent may step before this problem takes another step.
  torch::serialize::OutputArchive window_archive;
  window_archive.write("size", c10::IValue(static_cast<int64_t>(window_.size())));
  for (size_t i = 0; i < window_.size(); ++i) {
    const std::string key = std::to_string(i);
    if (window_[i].data.defined()) window_archive.write("data." + key, window_[i].data);
    if (window_[i].target.defined()) window_archive.write("target." + key, window_[i].target);
  }
  archive.write("window", window_archive);
  archive.write("nonfinite_window", c10::IValue(nonfinite_window_));
  // The gradients accumulated so far in the window (a run saved between two micro-steps).
  torch::serialize::OutputArchive grad_archive;
  const std::vector<at::Tensor> trainable = parameters();
  for (size_t i = 0; i < trainable.size(); ++i) {
    const at::Tensor& grad = trainable[i].grad();
    if (grad.defined()) grad_archive.write(std::to_string(i), grad, /*is_buffer=*/true);
  }
  archive.write("accumulated_grads", grad_archive);
  torch::serialize::OutputArchive values_archive;
  save_step_values(values_archive);
  archive.write("step_values", values_archive);
  torch::serialize::OutputArchive step_archive;
  save_step_state(step_archive);
  archive.write("step_state", step_archive);
  // The roll-back snapshot taken at the start of the current unroll.
  if (cached_state_) {
    const std::string bytes = cached_state_->str();
    archive.write("roll_back_state",
                  at::tensor(at::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                   bytes.size())),
                  /*is_buffer=*/true);
  }
}

void Problem::load_state_dict(torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive module_archive;
  archive.read("module", module_archive);
  check_shapes(module(), module_archive, "problem '" + name_ + "'", "");
  module().load(module_archive);
  if (zero3_) {
    load_shards(zero3_->shards(), archive, "problem '" + name_ + "'");
  } else {
    torch::serialize::InputArchive shards;
    MLO_CHECK(!archive.try_read("zero3_shards", shards), "problem '", name_, "': the saved ",
              "state holds its parameters as zero3 shards, but this run does not shard them ",
              "(data_parallel false, or another strategy); resume with the saved settings");
  }
  if (optimizer_) {
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    load_optimizer(*optimizer_, optimizer_archive);
  }
  if (stream_) {
    torch::serialize::InputArchive data_archive;
    if (archive.try_read("data", data_archive)) stream_->load(data_archive);
  }
  const std::string owner = "problem '" + name_ + "'";
  step_count_ = mlo::archive::read_int(archive, "step_count", owner);
  optimizer_steps_ = mlo::archive::read_int(archive, "optimizer_steps", owner);
  {
    std::istringstream names(mlo::archive::read_string(archive, "metric_names", owner));
    const auto numbers = mlo::archive::read_doubles(archive, "metric_values", owner);
    metrics_.clear();
    std::string name;
    for (size_t i = 0; std::getline(names, name) && i < numbers.size(); ++i) {
      metrics_[name] = numbers[i];
    }
    last_loss_ = mlo::archive::read_double(archive, "last_loss", owner);
  }
  if (scaler_) {
    torch::serialize::InputArchive scaler_archive;
    if (archive.try_read("loss_scaler", scaler_archive)) scaler_->load(scaler_archive);
  }
  window_.clear();
  torch::serialize::InputArchive window_archive;
  if (archive.try_read("window", window_archive)) {
    const int64_t size = mlo::archive::read_int(window_archive, "size", owner);
    for (int64_t i = 0; i < size; ++i) {
      const std::string key = std::to_string(i);
      Batch b;
      window_archive.try_read("data." + key, b.data);
      window_archive.try_read("target." + key, b.target);
      window_.push_back(b.to(device()));
    }
    if (!window_.empty()) current_batch_ = window_.back();
  }
  nonfinite_window_ = mlo::archive::read_bool(archive, "nonfinite_window", owner);
  torch::serialize::InputArchive grad_archive;
  MLO_CHECK(archive.try_read("accumulated_grads", grad_archive), owner,
            ": the saved state has no 'accumulated_grads' (saved by another version?)");
  const std::vector<at::Tensor> trainable = parameters();
  for (size_t i = 0; i < trainable.size(); ++i) {
    at::Tensor grad;
    trainable[i].mutable_grad() =
        grad_archive.try_read(std::to_string(i), grad, /*is_buffer=*/true) ? grad : at::Tensor();
  }
  cached_state_.reset();
  at::Tensor bytes;
  if (archive.try_read("roll_back_state", bytes, /*is_buffer=*/true)) {
    bytes = bytes.cpu().contiguous();  // (the state file maps every tensor to the run's device)
    cached_state_ = std::make_shared<std::stringstream>(
        std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                    static_cast<size_t>(bytes.numel())));
  }
  // NOTE: states saved before the library kept step values (or subclasses a step state) lack
  // them: they start empty (the next own steps refill them).
  torch::serialize::InputArchive values_archive;
  if (archive.try_read("step_values", values_archive)) {
    load_step_values(values_archive);
  } else {
    step_values_.clear();
  }
  torch::serialize::InputArchive step_archive;
  if (archive.try_read("step_state", step_archive)) load_step_state(step_archive);
  apply_schedule();
}

void Problem::cache_state() {
  // Roll-back rewinds parameters, buffers, optimizer state and the optimizer-step count (so the
  // learning-rate schedule sees one step per unroll); not the data position or local steps.
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive module_archive;
  module().save(module_archive);
  archive.write("module", module_archive);
  if (zero3_) save_shards(zero3_->shards(), archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer().save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("optimizer_steps", c10::IValue(optimizer_steps_));
  cached_state_ = std::make_shared<std::stringstream>();
  archive.save_to(*cached_state_);
}

void Problem::restore_state() {
  MLO_INTERNAL_ASSERT(cached_state_, "roll-back without a cached state in ", name_);
  cached_state_->seekg(0);
  torch::serialize::InputArchive archive;
  // On this problem's device: a snapshot saved on another one (before a resume there) would move
  // the parameters back to it.
  archive.load_from(*cached_state_, device());
  torch::serialize::InputArchive module_archive;
  archive.read("module", module_archive);
  module().load(module_archive);
  if (zero3_) load_shards(zero3_->shards(), archive, "roll-back snapshot of '" + name_ + "'");
  torch::serialize::InputArchive optimizer_archive;
  archive.read("optimizer", optimizer_archive);
  load_optimizer(optimizer(), optimizer_archive);
  optimizer_steps_ = mlo::archive::read_int(archive, "optimizer_steps", "roll-back snapshot of '" + name_ + "'");
  apply_schedule();
}

}  // namespace mlo
