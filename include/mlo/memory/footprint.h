#pragma once
/// \file
/// Parameter footprint of a level: bytes of parameters, gradients and optimizer state.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace mlo {

namespace memory {

/// Bytes held by a level between steps.
struct Footprint {
  int64_t parameters = 0;       ///< every parameter of the module (trainable or not)
  int64_t gradients = 0;        ///< defined `.grad()` tensors
  int64_t optimizer_state = 0;  ///< momentum buffers, Adam moments, ...
  /// The sum of the three.
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

/// Footprint of a module and (optionally) its optimizer. Optimizer state is counted for
/// LibTorch's SGD, Adam, AdamW, Adagrad, RMSprop and LBFGS.
Footprint footprint(const torch::nn::Module& module, const torch::optim::Optimizer* optimizer);

/// A text table, one row per (name, footprint), in MiB.
std::string footprint_table(const std::vector<std::pair<std::string, Footprint>>& rows);

}  // namespace memory
}  // namespace mlo
