#include "gradient_sync.h"

#include "zero3.h"

#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>
#include <mlo/nn/chain.h>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/nn/utils/clip_grad.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mlo {
namespace detail {
namespace {

// Greedy balance: the largest parameters first, each to the rank holding the fewest elements so
// far (ties to the lower rank). Deterministic, so every rank computes the same owners.
std::vector<int> balance(const std::vector<at::Tensor>& params, int ranks) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(params.size(), 0);
  for (size_t i : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(lightest);
    load[static_cast<size_t>(lightest)] += params[i].numel();
  }
  return owner;
}

// A level that takes part in data parallelism: the group, and the collectives every strategy
// shares. `device`: where the flags and norms of the collectives live (the model's device: NCCL
// reduces device tensors only; zero3's offloaded shards are in host memory).
class Averaged : public GradientSync {
 public:
  Averaged(std::shared_ptr<dist::ProcessGroup> group, c10::Device device)
      : group_(std::move(group)), device_(device) {}
  dist::ProcessGroup* group() const override { return group_.get(); }
  void mean(const std::vector<at::Tensor>& tensors) const override {
    group_->all_reduce_mean(tensors);
  }
  void after_step(const std::vector<at::Tensor>&,
                  const std::vector<at::Tensor>& buffers) const override {
    // Rank 0's buffers (batch-norm running statistics) on every rank.
    if (!buffers.empty()) group_->broadcast(buffers, /*root=*/0);
  }

 protected:
  // Whether `local` holds on every rank.
  bool everywhere(bool local) const {
    at::Tensor flag =
        at::full({1}, local ? 0.0 : 1.0, at::TensorOptions(at::kDouble).device(device_));
    group_->all_reduce_sum({flag});
    return flag.item<double>() == 0.0;
  }
  // Clips the global L2 norm of gradients each rank holds a share of (the rule of
  // torch::nn::utils::clip_grad_norm_, with the norm summed over the ranks).
  void clip_shared(const std::vector<at::Tensor>& params, double max_norm) const {
    at::NoGradGuard no_grad;
    at::Tensor squares = at::zeros({1}, at::TensorOptions(at::kDouble).device(device_));
    for (const auto& p : params) {
      if (p.grad().defined()) squares += p.grad().detach().to(at::kDouble).pow(2).sum().to(device_);
    }
    group_->all_reduce_sum({squares});
    const double norm = std::sqrt(squares.item<double>());
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient >= 1.0) return;
    for (const auto& p : params) {
      if (p.grad().defined()) p.grad().mul_(coefficient);
    }
  }

  std::shared_ptr<dist::ProcessGroup> group_;
  c10::Device device_;
};

class None : public GradientSync {
 public:
  const char* name() const override { return "none"; }
};

class Replicas : public GradientSync {
 public:
  explicit Replicas(std::shared_ptr<dist::ProcessGroup> group) : group_(std::move(group)) {}
  const char* name() const override { return "replicas"; }
  void after_step(const std::vector<at::Tensor>& params,
                  const std::vector<at::Tensor>& buffers) const override {
    std::vector<at::Tensor> state = params;
    state.insert(state.end(), buffers.begin(), buffers.end());
    group_->broadcast(state, /*root=*/0);
  }

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
};

class Distributed : public Averaged {
 public:
  using Averaged::Averaged;
  const char* name() const override { return "distributed"; }
  void window_end(const std::vector<at::Tensor>& grads) const override {
    group_->all_reduce_mean(grads);
  }
};

// zero1 (gradients averaged whole at the boundary) and zero2 (reduce-scattered every
// micro-step): each rank steps the parameters it owns, then broadcasts them.
class ShardedOptimizer : public Averaged {
 public:
  ShardedOptimizer(std::shared_ptr<dist::ProcessGroup> group, c10::Device device,
                   const std::vector<at::Tensor>& params, bool shard_gradients)
      : Averaged(std::move(group), device),
        owner_(balance(params, group_->size())),
        shard_gradients_(shard_gradients) {}
  const char* name() const override { return shard_gradients_ ? "zero2" : "zero1"; }
  void micro_step(std::vector<at::Tensor>& grads) const override {
    if (!shard_gradients_) return;
    MLO_INTERNAL_ASSERT(grads.size() == owner_.size(), "reduce_scatter: ", grads.size(),
                        " gradients for ", owner_.size(), " parameters");
    for (int root = 0; root < group_->size(); ++root) {
      std::vector<at::Tensor> owned;
      for (size_t i = 0; i < grads.size(); ++i) {
        if (owner_[i] == root) owned.push_back(grads[i]);
      }
      group_->reduce_mean(owned, root);
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (owner_[i] != group_->rank()) grads[i] = at::Tensor();
    }
  }
  void window_end(const std::vector<at::Tensor>& grads) const override {
    if (!shard_gradients_) group_->all_reduce_mean(grads);
  }
  bool all_finite(bool local) const override {
    return shard_gradients_ ? everywhere(local) : local;
  }
  void clip(const std::vector<at::Tensor>& params, double max_norm) const override {
    if (shard_gradients_) {
      clip_shared(params, max_norm);
    } else {
      GradientSync::clip(params, max_norm);
    }
  }
  void before_step(const std::vector<at::Tensor>& params) const override {
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner_[i] != group_->rank()) {
        at::Tensor param = params[i];
        param.mutable_grad().reset();
      }
    }
  }
  void after_step(const std::vector<at::Tensor>& params,
                  const std::vector<at::Tensor>& buffers) const override {
    for (int root = 0; root < group_->size(); ++root) {
      std::vector<at::Tensor> owned;
      for (size_t i = 0; i < params.size(); ++i) {
        if (owner_[i] == root) owned.push_back(params[i]);
      }
      group_->broadcast(owned, root);
    }
    Averaged::after_step(params, buffers);
  }

 private:
  std::vector<int> owner_;
  bool shard_gradients_;
};

class ShardedParameters : public Averaged {
 public:
  ShardedParameters(std::shared_ptr<dist::ProcessGroup> group, c10::Device device,
                    const Zero3& zero3)
      : Averaged(std::move(group), device), zero3_(zero3) {}
  const char* name() const override { return "zero3"; }
  bool shards_parameters() const override { return true; }
  // (each shard's gradient arrived averaged from its unit's backward: nothing at the boundary)
  bool all_finite(bool local) const override { return everywhere(local); }
  void clip(const std::vector<at::Tensor>& params, double max_norm) const override {
    clip_shared(params, max_norm);
  }
  bool finite_everywhere(bool local) const override { return everywhere(local); }
  double sum_over_shards(double local) const override {
    at::Tensor sum = at::full({1}, local, at::TensorOptions(at::kDouble).device(device_));
    group_->all_reduce_sum({sum});
    return sum.item<double>();
  }
  std::string summary(const std::string& owner) const override {
    const auto& t = zero3_.traffic();
    return c10::str("problem '", owner, "': zero3 shards of ", zero3_.shard_bytes(), " bytes; ",
                    t.gathers, " all-gathers (", t.gather_seconds, " s), ", t.reduce_scatters,
                    " reduce-scatters (", t.reduce_scatter_seconds, " s) in this process");
  }

 private:
  const Zero3& zero3_;
};

}  // namespace

void GradientSync::clip(const std::vector<at::Tensor>& params, double max_norm) const {
  torch::nn::utils::clip_grad_norm_(params, max_norm);
}

std::unique_ptr<GradientSync> make_gradient_sync(
    const std::shared_ptr<dist::ProcessGroup>& group, dist::Strategy strategy, bool data_parallel,
    const SyncedLevel& level, std::unique_ptr<Zero3>& zero3) {
  const std::string& name = level.name;
  const c10::Device device = level.device;
  std::vector<at::Tensor>& trainable = level.trainable;
  auto* chain = level.module != nullptr ? dynamic_cast<nn::ChainImpl*>(level.module) : nullptr;
  const bool sharded = group != nullptr && data_parallel && strategy == dist::Strategy::kZero3 &&
                       chain != nullptr;
  if (sharded) {
    // (a second engine keeps the shards: the module's parameters hold no values any more)
    if (!zero3) {
      zero3 = std::make_unique<Zero3>(*chain, level.optimizer, group, name, level.offload);
    }
    MLO_CHECK(&zero3->group() == group.get(), "problem '", name, "': its parameters are ",
              "sharded over another process group (an earlier engine's); a problem sharded by ",
              "zero3 stays with its group");
    trainable = zero3->shards();
    return std::make_unique<ShardedParameters>(group, device, *zero3);
  }
  MLO_CHECK(!zero3, "problem '", name, "': its parameters are sharded by strategy zero3; ",
            "run it again with zero3 and the same group");
  if (group == nullptr) return std::make_unique<None>();
  if (!data_parallel) return std::make_unique<Replicas>(group);
  switch (strategy) {
    case dist::Strategy::kDefault:
    case dist::Strategy::kDistributed:
      return std::make_unique<Distributed>(group, device);
    case dist::Strategy::kZero1:
      return std::make_unique<ShardedOptimizer>(group, device, trainable, /*shard_gradients=*/false);
    case dist::Strategy::kZero2:
    case dist::Strategy::kZero3:  // (a model that is no nn::Chain: its gradients are sharded)
      return std::make_unique<ShardedOptimizer>(group, device, trainable, /*shard_gradients=*/true);
  }
  MLO_INTERNAL_ASSERT(false, "an unknown strategy");
}

}  // namespace detail
}  // namespace mlo
