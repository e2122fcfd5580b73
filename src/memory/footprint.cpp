#include <mlo/memory/footprint.h>
#include <mlo/memory/meter.h>

#include <torch/nn/module.h>
#include <torch/optim.h>

#include <cstdio>
#include <sstream>

namespace mlo {
namespace memory {
namespace {

int64_t bytes(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

int64_t state_bytes(const torch::optim::OptimizerParamState& state) {
  using namespace torch::optim;
  if (auto s = dynamic_cast<const SGDParamState*>(&state)) return bytes(s->momentum_buffer());
  if (auto s = dynamic_cast<const AdamParamState*>(&state)) {
    return bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
  }
  if (auto s = dynamic_cast<const AdamWParamState*>(&state)) {
    return bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
  }
  if (auto s = dynamic_cast<const AdagradParamState*>(&state)) return bytes(s->sum());
  if (auto s = dynamic_cast<const RMSpropParamState*>(&state)) {
    return bytes(s->square_avg()) + bytes(s->momentum_buffer()) + bytes(s->grad_avg());
  }
  if (auto s = dynamic_cast<const LBFGSParamState*>(&state)) {
    int64_t total = bytes(s->d()) + bytes(s->prev_flat_grad());
    for (const auto& t : s->old_dirs()) total += bytes(t);
    for (const auto& t : s->old_stps()) total += bytes(t);
    return total;
  }
  return 0;
}

}  // namespace

Footprint footprint(const torch::nn::Module& module, const torch::optim::Optimizer* optimizer) {
  Footprint out;
  for (const auto& p : module.parameters()) {
    out.parameters += bytes(p);
    out.gradients += bytes(p.grad());
  }
  if (optimizer != nullptr) {
    for (const auto& [key, state] : optimizer->state()) out.optimizer_state += state_bytes(*state);
  }
  return out;
}

std::string footprint_table(const std::vector<std::pair<std::string, Footprint>>& rows) {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-16s %12s %12s %12s %12s\n", "level", "params MiB",
                "grads MiB", "optim MiB", "total MiB");
  out << line;
  for (const auto& [name, f] : rows) {
    std::snprintf(line, sizeof(line), "%-16s %12.3f %12.3f %12.3f %12.3f\n", name.c_str(),
                  to_mib(f.parameters), to_mib(f.gradients), to_mib(f.optimizer_state),
                  to_mib(f.total()));
    out << line;
  }
  return out.str();
}

}  // namespace memory
}  // namespace mlo
