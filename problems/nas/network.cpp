#include "problems/nas/network.h"

#include <mlo/base/error.h>
#include <mlo/nn/batch_norm.h>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace mlo {
namespace problems {
namespace nas {
namespace {

namespace F = torch::nn::functional;

enum Kind : int64_t { kConv3 = 0, kConv5 = 1, kMaxPool = 2, kAvgPool = 3, kSkip = 4, kZero = 5 };

at::Tensor pool2(const at::Tensor& x) { return F::max_pool2d(x, F::MaxPool2dFuncOptions(2)); }

}  // namespace

OperationImpl::OperationImpl(const std::string& name, int64_t channels)
    : kind_(operation_index(name)) {
  if (kind_ == kConv3 || kind_ == kConv5) {
    const int64_t k = kind_ == kConv3 ? 3 : 5;
    conv_ = register_module(
        "conv", torch::nn::Conv2d(
                    torch::nn::Conv2dOptions(channels, channels, k).padding(k / 2).bias(false)));
    norm_ = register_module(
        "norm", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(channels).affine(false)));
  }
}

at::Tensor OperationImpl::forward(const at::Tensor& x) {
  switch (kind_) {
    case kConv3:
    case kConv5:
      return nn::batch_norm_forward(*norm_, conv_->forward(F::relu(x)));
    case kMaxPool:
      return F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(1).padding(1));
    case kAvgPool:
      return F::avg_pool2d(x,
                           F::AvgPool2dFuncOptions(3).stride(1).padding(1).count_include_pad(false));
    case kSkip:
      return x;
    default:
      return x * 0.0;
  }
}

NetworkBase::NetworkBase(int64_t in_channels, int64_t channels, int64_t classes) {
  stem_conv_ = register_module(
      "stem", torch::nn::Conv2d(
                  torch::nn::Conv2dOptions(in_channels, channels, 3).padding(1).bias(false)));
  stem_norm_ = register_module("stem_norm", torch::nn::BatchNorm2d(channels));
  classifier_ = register_module("classifier", torch::nn::Linear(channels, classes));
}

at::Tensor NetworkBase::stem(const at::Tensor& x) {
  return pool2(nn::batch_norm_forward(*stem_norm_, stem_conv_->forward(x)));
}

at::Tensor NetworkBase::head(const at::Tensor& x) {
  return classifier_->forward(x.mean({2, 3}));
}

SearchNetworkImpl::SearchNetworkImpl(int64_t in_channels, int64_t classes, int64_t nodes,
                                     int64_t cells, int64_t channels)
    : NetworkBase(in_channels, channels, classes), nodes_(nodes), cells_(cells) {
  const auto edges = cell_edges(nodes);
  for (int64_t c = 0; c < cells; ++c) {
    ops_.emplace_back();
    for (size_t e = 0; e < edges.size(); ++e) {
      ops_.back().emplace_back();
      for (const auto& name : operation_names()) {
        if (name == "zero") continue;
        ops_.back().back().push_back(register_module(
            "cell" + std::to_string(c) + "_edge" + std::to_string(e) + "_" + name,
            Operation(name, channels)));
      }
    }
  }
}

at::Tensor SearchNetworkImpl::forward(const at::Tensor& x, const at::Tensor& mixing) {
  const auto edges = cell_edges(nodes_);
  MLO_CHECK(mixing.dim() == 2 && mixing.size(0) == static_cast<int64_t>(edges.size()),
            "SearchNetwork: mixing weights must be [", edges.size(), ", operations], got ",
            mixing.sizes());
  at::Tensor h = stem(x);
  for (int64_t c = 0; c < cells_; ++c) {
    std::vector<at::Tensor> node{h};
    for (size_t e = 0; e < edges.size(); ++e) {
      const auto [i, j] = edges[e];
      if (static_cast<int64_t>(node.size()) <= j) node.push_back(at::Tensor());
      at::Tensor sum;
      auto& ops = ops_[static_cast<size_t>(c)][e];
      for (size_t k = 0; k < ops.size(); ++k) {  // ("zero" adds nothing)
        const at::Tensor term =
            mixing[static_cast<int64_t>(e)][static_cast<int64_t>(k)] *
            ops[k]->forward(node[static_cast<size_t>(i)]);
        sum = sum.defined() ? sum + term : term;
      }
      at::Tensor& out = node[static_cast<size_t>(j)];
      out = out.defined() ? out + sum : sum;
    }
    at::Tensor mean = node[1];
    for (size_t j = 2; j < node.size(); ++j) mean = mean + node[j];
    h = pool2(mean / static_cast<double>(nodes_));
  }
  return head(h);
}

FixedNetworkImpl::FixedNetworkImpl(int64_t in_channels, int64_t classes, Genotype genotype)
    : NetworkBase(in_channels, genotype.channels, classes), genotype_(std::move(genotype)) {
  genotype_.check("FixedNetwork");
  for (int64_t c = 0; c < genotype_.cells; ++c) {
    ops_.emplace_back();
    for (size_t e = 0; e < genotype_.edges.size(); ++e) {
      ops_.back().push_back(register_module(
          "cell" + std::to_string(c) + "_edge" + std::to_string(e) + "_" + genotype_.edges[e].op,
          Operation(genotype_.edges[e].op, genotype_.channels)));
    }
  }
}

at::Tensor FixedNetworkImpl::forward(const at::Tensor& x) {
  at::Tensor h = stem(x);
  for (int64_t c = 0; c < genotype_.cells; ++c) {
    std::vector<at::Tensor> node(static_cast<size_t>(genotype_.nodes + 1));
    node[0] = h;
    // (edges in node order: every input is complete before a later node reads it)
    for (int64_t j = 1; j <= genotype_.nodes; ++j) {
      for (size_t e = 0; e < genotype_.edges.size(); ++e) {
        const GenotypeEdge& edge = genotype_.edges[e];
        if (edge.node != j) continue;
        const at::Tensor term =
            ops_[static_cast<size_t>(c)][e]->forward(node[static_cast<size_t>(edge.input)]);
        at::Tensor& out = node[static_cast<size_t>(j)];
        out = out.defined() ? out + term : term;
      }
    }
    at::Tensor mean = node[1];
    for (size_t j = 2; j < node.size(); ++j) mean = mean + node[j];
    h = pool2(mean / static_cast<double>(genotype_.nodes));
  }
  return head(h);
}

}  // namespace nas
}  // namespace problems
}  // namespace mlo
