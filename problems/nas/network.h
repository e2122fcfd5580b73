#pragma once
/// \file
/// The networks of the search space (problems/nas/search_space.h): a 3x3 convolution stem with
/// batch norm and 2x2 max-pooling, `cells` cells each followed by 2x2 max-pooling, global average pooling and a
/// linear classifier. `SearchNetwork`'s cells mix every operation on every edge by the
/// architecture weights it is given (DARTS' continuous relaxation: softmax over operations);
/// `FixedNetwork`'s cells apply one genotype. Batch norm runs through
/// `nn::batch_norm_forward`, so forward-mode hypergradients (`mode: jvp`) work through it.

#include "problems/nas/search_space.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace nas {

/// One candidate operation on `channels` channels (stride 1, same size out).
class OperationImpl : public torch::nn::Module {
 public:
  OperationImpl(const std::string& name, int64_t channels);
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t kind_;
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d norm_{nullptr};
};
TORCH_MODULE(Operation);

/// The stem, pooling and head around the cells.
class NetworkBase : public torch::nn::Module {
 protected:
  NetworkBase(int64_t in_channels, int64_t channels, int64_t classes);
  at::Tensor stem(const at::Tensor& x);
  at::Tensor head(const at::Tensor& x);

 private:
  torch::nn::Conv2d stem_conv_{nullptr};
  torch::nn::BatchNorm2d stem_norm_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};

/// The supernet: every edge of every cell runs every operation but "zero".
class SearchNetworkImpl : public NetworkBase {
 public:
  SearchNetworkImpl(int64_t in_channels, int64_t classes, int64_t nodes, int64_t cells,
                    int64_t channels);
  /// Logits of `x` with the operations mixed by `mixing` ([edges, operations], each row
  /// summing to 1: the softmax of the architecture weights).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mixing);

 private:
  int64_t nodes_;
  int64_t cells_;
  // per cell, per edge, per operation but zero (in operation_names() order)
  std::vector<std::vector<std::vector<Operation>>> ops_;
};
TORCH_MODULE(SearchNetwork);

/// The network of one genotype.
class FixedNetworkImpl : public NetworkBase {
 public:
  FixedNetworkImpl(int64_t in_channels, int64_t classes, Genotype genotype);
  at::Tensor forward(const at::Tensor& x);
  const Genotype& genotype() const { return genotype_; }

 private:
  Genotype genotype_;
  std::vector<std::vector<Operation>> ops_;  // per cell, per genotype edge
};
TORCH_MODULE(FixedNetwork);

}  // namespace nas
}  // namespace problems
}  // namespace mlo
