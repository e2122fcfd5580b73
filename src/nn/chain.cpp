#include <mlo/nn/chain.h>

#include <mlo/base/error.h>
#include <mlo/nn/batch_norm.h>

#include <algorithm>

namespace mlo {
namespace nn {
namespace {

// "layer1.0.a" -> {"layer1", "0", "a"}; empty components are kept so the caller can reject them.
std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (true) {
    const auto dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

// Block `block` on `x`, a BatchNorm2d through batch_norm_forward (forward-mode products
// differentiate it twice).
torch::Tensor run_plainly(torch::nn::AnyModule& block, const torch::Tensor& x) {
  if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(block.ptr().get())) {
    return batch_norm_forward(*bn, x);
  }
  return block.forward(x);
}

}  // namespace

ChainImpl& ChainImpl::push_back(const std::string& name, torch::nn::AnyModule block) {
  MLO_CHECK(!block.is_empty(), "Chain::push_back: block '", name, "' is an empty AnyModule");
  MLO_CHECK(!name.empty(), "Chain::push_back: block ", size(), " needs a non-empty name");
  MLO_CHECK(!index_of(name), "Chain::push_back: a block named '", name, "' already exists");
  const std::vector<std::string> parts = split_name(name);
  for (const auto& part : parts) {
    MLO_CHECK(!part.empty(), "Chain::push_back: block name '", name, "' has an empty component");
  }

  // Walk (and create) the group submodules of a dotted name.
  torch::nn::Module* parent = this;
  std::string prefix;
  for (std::size_t k = 0; k + 1 < parts.size(); ++k) {
    prefix += (k == 0 ? "" : ".") + parts[k];
    auto group = std::find_if(groups_.begin(), groups_.end(),
                              [&](const auto& entry) { return entry.first == prefix; });
    if (group != groups_.end()) {
      // NOTE: a group's blocks must be contiguous, or parameters() would leave block order.
      MLO_CHECK(!names_.empty() && starts_with(names_.back(), prefix + "."),
                "Chain::push_back: block '", name, "' joins group '", prefix,
                "', but the previous block '", (names_.empty() ? "" : names_.back()),
                "' is outside it; the blocks of a group must be contiguous");
      parent = group->second.get();
      continue;
    }
    MLO_CHECK(!parent->named_children().contains(parts[k]), "Chain::push_back: block '", name,
              "' needs a group '", prefix, "', but a block of that name exists");
    auto created = std::make_shared<torch::nn::Module>("mlo::nn::ChainGroup");
    parent->register_module(parts[k], created);
    groups_.emplace_back(prefix, created);
    parent = created.get();
  }
  MLO_CHECK(!parent->named_children().contains(parts.back()), "Chain::push_back: block '", name,
            "' clashes with the group of the same name");
  parent->register_module(parts.back(), block.ptr());
  blocks_.push_back(std::move(block));
  names_.push_back(name);
  return *this;
}

torch::Tensor ChainImpl::forward(const torch::Tensor& x) {
  if (executor_) return executor_(*this, x);
  return forward_range(x, 0, size());
}

torch::Tensor ChainImpl::forward_range(const torch::Tensor& x, std::size_t begin, std::size_t end) {
  MLO_CHECK(begin <= end && end <= size(), "Chain::forward_range: range [", begin, ", ", end,
            ") is not inside the chain's ", size(), " blocks");
  torch::Tensor out = x;
  for (std::size_t i = begin; i < end; ++i) {
    out = runner_ ? runner_->run(*this, i, out) : run_plainly(blocks_[i], out);
  }
  return out;
}

torch::Tensor ChainImpl::forward_block(std::size_t i, const torch::Tensor& x) {
  if (runner_) {
    MLO_CHECK(i < size(), "Chain::forward_block: index ", i, " out of range for ", size(),
              " blocks");
    return runner_->run(*this, i, x);
  }
  return run_plainly(block(i), x);
}

torch::nn::AnyModule& ChainImpl::block(std::size_t i) {
  MLO_CHECK(i < size(), "Chain::block: index ", i, " out of range for ", size(), " blocks");
  return blocks_[i];
}

const torch::nn::AnyModule& ChainImpl::block(std::size_t i) const {
  MLO_CHECK(i < size(), "Chain::block: index ", i, " out of range for ", size(), " blocks");
  return blocks_[i];
}

std::shared_ptr<torch::nn::Module> ChainImpl::block_module(std::size_t i) const {
  return block(i).ptr();
}

std::vector<torch::Tensor> ChainImpl::range_parameters(std::size_t begin, std::size_t end) const {
  MLO_CHECK(begin <= end && end <= size(), "Chain::range_parameters: range [", begin, ", ", end,
            ") is not inside the chain's ", size(), " blocks");
  std::vector<torch::Tensor> out;
  for (std::size_t i = begin; i < end; ++i) {
    for (const auto& p : blocks_[i].ptr()->parameters()) out.push_back(p);
  }
  return out;
}

std::vector<torch::Tensor> ChainImpl::range_leaves(std::size_t begin, std::size_t end) const {
  if (!runner_) return range_parameters(begin, end);
  MLO_CHECK(begin <= end && end <= size(), "Chain::range_leaves: range [", begin, ", ", end,
            ") is not inside the chain's ", size(), " blocks");
  std::vector<torch::Tensor> out;
  for (std::size_t i = begin; i < end; ++i) {
    for (const auto& t : runner_->leaves(*this, i)) out.push_back(t);
  }
  return out;
}

std::vector<torch::Tensor> ChainImpl::range_buffers(std::size_t begin, std::size_t end) const {
  MLO_CHECK(begin <= end && end <= size(), "Chain::range_buffers: range [", begin, ", ", end,
            ") is not inside the chain's ", size(), " blocks");
  std::vector<torch::Tensor> out;
  for (std::size_t i = begin; i < end; ++i) {
    for (const auto& b : blocks_[i].ptr()->buffers()) out.push_back(b);
  }
  return out;
}

const std::string& ChainImpl::block_name(std::size_t i) const {
  MLO_CHECK(i < size(), "Chain::block_name: index ", i, " out of range for ", size(), " blocks");
  return names_[i];
}

std::optional<std::size_t> ChainImpl::index_of(const std::string& name) const {
  const auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end()) return std::nullopt;
  return static_cast<std::size_t>(it - names_.begin());
}

std::shared_ptr<torch::nn::Module> ChainImpl::clone(
    const torch::optional<torch::Device>& device) const {
  auto copy = std::make_shared<ChainImpl>();
  for (std::size_t i = 0; i < size(); ++i) {
    copy->push_back(names_[i], blocks_[i].clone(device));
  }
  copy->executor_ = executor_;
  // NOTE: cloned blocks keep their own modes; this only carries an eval chain over as eval.
  if (!is_training()) copy->train(false);
  return copy;
}

void ChainImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::Chain(size=" << size() << ")";
}

}  // namespace nn
}  // namespace mlo
