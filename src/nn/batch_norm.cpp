#include <mlo/nn/batch_norm.h>

#include <mlo/base/error.h>

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
  const auto& options = bn.options;
  auto has_tangent = [](const at::Tensor& t) {
    return t.defined() && t._fw_grad(/*level=*/0).defined();
  };
  // (a backward pass may follow where grad mode is on and it can reach x or the weight)
  const bool backward = at::GradMode::is_enabled() &&
                        (x.requires_grad() || (bn.weight.defined() && bn.weight.requires_grad()));
  const bool elementary = backward && x.numel() > 0 &&
                          (has_tangent(x) || has_tangent(bn.weight) || has_tangent(bn.bias));
  if (!elementary) return bn.forward(x);  // (the kernel also checks the input)
  MLO_CHECK(x.dim() == 4, "batch_norm_forward: expected a 4D input, got ", x.dim(), "D");
  MLO_CHECK(x.size(1) == options.num_features(), "batch_norm_forward: the input has ", x.size(1),
            " channels, the batch norm ", options.num_features());
  const bool batch_statistics = bn.is_training() || !options.track_running_stats();
  const int64_t per_channel_count = x.numel() / x.size(1);
  MLO_CHECK(!bn.is_training() || per_channel_count > 1,
            "batch_norm_forward: expected more than 1 value per channel when training, got an ",
            "input of size ", x.sizes());
  // (statistics in at least float32, as the kernel accumulates them; the result in x's dtype)
  const auto type = x.scalar_type();
  const at::Tensor input = type == at::kBFloat16 || type == at::kHalf ? x.to(at::kFloat) : x;
  at::Tensor mean, variance, centered;
  if (batch_statistics) {
    const std::vector<int64_t> dims{0, 2, 3};
    mean = input.mean(dims);
    centered = input - per_channel(mean);
    variance = centered.pow(2).mean(dims);  // biased, as the kernel normalizes
    if (bn.is_training() && options.track_running_stats()) {
      at::NoGradGuard no_grad;
      bn.num_batches_tracked.add_(1);
      const double momentum =
          options.momentum().has_value()
              ? *options.momentum()
              : 1.0 / bn.num_batches_tracked.item<double>();  // cumulative average
      const double n = static_cast<double>(per_channel_count);
      const at::Tensor batch_mean = mean.detach().to(bn.running_mean.scalar_type());
      const at::Tensor unbiased =
          (variance.detach() * (n / (n - 1.0))).to(bn.running_var.scalar_type());
      bn.running_mean.mul_(1.0 - momentum).add_(batch_mean, momentum);
      bn.running_var.mul_(1.0 - momentum).add_(unbiased, momentum);
    }
  } else {
    mean = bn.running_mean;
    variance = bn.running_var;
    centered = input - per_channel(mean);
  }
  // (one scale per channel: the backward pass keeps `centered`, and no normalized copy of x)
  at::Tensor scale = (variance + options.eps()).rsqrt();
  if (options.affine()) scale = scale * bn.weight;
  at::Tensor y = centered * per_channel(scale);
  if (options.affine()) y = y + per_channel(bn.bias);
  return y.to(type);
}

}  // namespace nn
}  // namespace mlo
