#include <mlo/nn/batch_norm.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <vector>

namespace mlo {
namespace nn {
namespace {

// A per-channel vector [C] shaped to broadcast over [N, C, H, W].
at::Tensor per_channel(const at::Tensor& t) { return t.view({1, -1, 1, 1}); }

}  // namespace

torch::Tensor batch_norm_forward(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
  const bool fused =
      !(x._fw_grad(/*level=*/0).defined() && at::GradMode::is_enabled() && x.requires_grad());
  if (fused) return bn.forward(x);
  const auto& options = bn.options;
  TORCH_CHECK(x.dim() == 4, "batch_norm_forward: expected a 4D input, got ", x.dim(), "D");
  const bool batch_statistics = bn.is_training() || !options.track_running_stats();
  at::Tensor mean, variance, centered;
  if (batch_statistics) {
    const std::vector<int64_t> dims{0, 2, 3};
    mean = x.mean(dims);
    centered = x - per_channel(mean);
    variance = centered.pow(2).mean(dims);  // biased, as the kernel normalizes
    if (bn.is_training() && options.track_running_stats()) {
      at::NoGradGuard no_grad;
      bn.num_batches_tracked.add_(1);
      const double momentum =
          options.momentum().has_value()
              ? *options.momentum()
              : 1.0 / bn.num_batches_tracked.item<double>();  // cumulative average
      const double n = static_cast<double>(x.numel() / x.size(1));
      const at::Tensor batch_mean = mean.detach().to(bn.running_mean.scalar_type());
      const at::Tensor unbiased =
          (variance.detach() * (n / (n - 1.0))).to(bn.running_var.scalar_type());
      bn.running_mean.mul_(1.0 - momentum).add_(batch_mean, momentum);
      bn.running_var.mul_(1.0 - momentum).add_(unbiased, momentum);
    }
  } else {
    mean = bn.running_mean;
    variance = bn.running_var;
    centered = x - per_channel(mean);
  }
  // (one scale per channel: the backward pass keeps `centered`, and no normalized copy of x)
  at::Tensor scale = (variance + options.eps()).rsqrt();
  if (options.affine()) scale = scale * bn.weight;
  at::Tensor y = centered * per_channel(scale);
  if (options.affine()) y = y + per_channel(bn.bias);
  return y.to(x.scalar_type());
}

}  // namespace nn
}  // namespace mlo
