#include "data_parallel.h"

#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>

#include <ATen/ATen.h>

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

}  // namespace

DataParallel::DataParallel(dist::ProcessGroup& group, dist::Strategy strategy,
                           const std::vector<at::Tensor>& params, c10::Device device)
    : group_(group), strategy_(strategy), device_(device) {
  if (shards_optimizer()) owner_ = balance(params, group.size());
}

bool DataParallel::shards_optimizer() const {
  return dist::shards_optimizer_state(strategy_);
}

bool DataParallel::shards_gradients() const {
  return strategy_ == dist::Strategy::kZero2 || strategy_ == dist::Strategy::kZero3;
}

void DataParallel::reduce_scatter(std::vector<at::Tensor>& grads) const {
  MLO_INTERNAL_ASSERT(grads.size() == owner_.size(), "reduce_scatter: ", grads.size(),
                      " gradients for ", owner_.size(), " parameters");
  for (int root = 0; root < group_.size(); ++root) {
    std::vector<at::Tensor> owned;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (owner_[i] == root) owned.push_back(grads[i]);
    }
    group_.reduce_mean(owned, root);
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (owner_[i] != group_.rank()) grads[i] = at::Tensor();
  }
}

void DataParallel::all_reduce(const std::vector<at::Tensor>& grads) const {
  group_.all_reduce_mean(grads);
}

bool DataParallel::all_finite(bool local) const {
  at::Tensor flag = at::full({1}, local ? 0.0 : 1.0, at::TensorOptions(at::kDouble).device(device_));
  group_.all_reduce_sum({flag});
  return flag.item<double>() == 0.0;
}

void DataParallel::clip(const std::vector<at::Tensor>& params, double max_norm) const {
  at::NoGradGuard no_grad;
  at::Tensor squares = at::zeros({1}, at::TensorOptions(at::kDouble).device(device_));
  for (const auto& p : params) {
    if (p.grad().defined()) squares += p.grad().detach().to(at::kDouble).pow(2).sum().to(device_);
  }
  group_.all_reduce_sum({squares});
  const double norm = std::sqrt(squares.item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient >= 1.0) return;
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(coefficient);
  }
}

void DataParallel::drop_unowned(const std::vector<at::Tensor>& params) const {
  for (size_t i = 0; i < params.size(); ++i) {
    if (owner_[i] != group_.rank()) {
      at::Tensor param = params[i];
      param.mutable_grad().reset();
    }
  }
}

void DataParallel::gather(const std::vector<at::Tensor>& params) const {
  for (int root = 0; root < group_.size(); ++root) {
    std::vector<at::Tensor> owned;
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner_[i] == root) owned.push_back(params[i]);
    }
    group_.broadcast(owned, root);
  }
}

void DataParallel::sync_buffers(const std::vector<at::Tensor>& buffers) const {
  if (!buffers.empty()) group_.broadcast(buffers, /*root=*/0);
}

}  // namespace detail
}  // namespace mlo
