#include <mlo/nn/mwn.h>

#include <mlo/base/error.h>

namespace mlo {
namespace nn {

MWNImpl::MWNImpl(const MWNOptions& options_) : options(options_) {
  MLO_CHECK(options.hidden() > 0, "MWNOptions: hidden must be positive, got ", options.hidden());
  reset();
}

void MWNImpl::reset() {
  fc1 = register_module("fc1", torch::nn::Linear(1, options.hidden()));
  fc2 = register_module("fc2", torch::nn::Linear(options.hidden(), 1));
}

torch::Tensor MWNImpl::forward(const torch::Tensor& losses) {
  MLO_CHECK(losses.dim() == 2 && losses.size(1) == 1,
            "MWN: expects per-sample losses as a column [N, 1], got ", losses.sizes(),
            " (use losses.unsqueeze(1))");
  return torch::sigmoid(fc2->forward(torch::relu(fc1->forward(losses))));
}

void MWNImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::MWN(hidden=" << options.hidden() << ")";
}

}  // namespace nn
}  // namespace mlo
