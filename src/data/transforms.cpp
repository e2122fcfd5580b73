#include <mlo/base/error.h>
#include <mlo/data/transforms.h>

#include <torch/torch.h>

namespace mlo {
namespace data {
namespace {

void check_batch(const at::Tensor& images, const char* what) {
  MLO_CHECK(images.defined() && images.dim() == 4, what, ": expects an N x C x H x W batch, got ",
            images.sizes());
  MLO_CHECK(images.is_floating_point(), what, ": expects float images (see to_float), got ",
            images.scalar_type());
}

}  // namespace

at::Tensor to_float(const at::Tensor& images) {
  if (images.scalar_type() == torch::kUInt8) return images.to(torch::kFloat).div_(255);
  if (images.is_floating_point()) return images;
  return images.to(torch::kFloat);
}

at::Tensor random_crop(const at::Tensor& images, int64_t size, int64_t padding,
                       at::Generator& generator) {
  check_batch(images, "random_crop");
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  MLO_CHECK(padding >= 0 && padding < h && padding < w, "random_crop: padding must be in 0..",
            std::min(h, w) - 1, " for ", h, "x", w, " images, got ", padding);
  MLO_CHECK(size >= 1 && size <= h + 2 * padding && size <= w + 2 * padding, "random_crop: size ",
            size, " does not fit ", h, "x", w, " images padded by ", padding);
  const auto padded =
      padding > 0 ? torch::reflection_pad2d(images, {padding, padding, padding, padding}) : images;
  const auto dy = torch::randint(0, h + 2 * padding - size + 1, {n}, generator, torch::kLong);
  const auto dx = torch::randint(0, w + 2 * padding - size + 1, {n}, generator, torch::kLong);
  auto out = torch::empty({n, images.size(1), size, size}, images.options());
  const auto* y = dy.data_ptr<int64_t>();
  const auto* x = dx.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    out[i].copy_(padded[i].narrow(1, y[i], size).narrow(2, x[i], size));
  }
  return out;
}

at::Tensor random_horizontal_flip(const at::Tensor& images, at::Generator& generator, double p) {
  check_batch(images, "random_horizontal_flip");
  MLO_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1], got ", p);
  const auto flip = torch::rand({images.size(0)}, generator, images.options()).lt(p);
  return torch::where(flip.view({-1, 1, 1, 1}), images.flip({3}), images);
}

at::Tensor normalize(const at::Tensor& images, const std::vector<double>& mean,
                     const std::vector<double>& std) {
  check_batch(images, "normalize");
  const auto c = images.size(1);
  MLO_CHECK(static_cast<int64_t>(mean.size()) == c && static_cast<int64_t>(std.size()) == c,
            "normalize: needs one mean and one std per channel (", c, "), got ", mean.size(),
            " and ", std.size());
  for (double s : std) MLO_CHECK(s > 0, "normalize: std must be > 0, got ", s);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto m = torch::tensor(mean, opts).to(images.options()).view({1, c, 1, 1});
  const auto s = torch::tensor(std, opts).to(images.options()).view({1, c, 1, 1});
  return (images - m) / s;
}

Transform compose(std::vector<Transform> transforms) {
  return [transforms = std::move(transforms)](const at::Tensor& images, at::Generator& gen) {
    at::Tensor out = images;
    for (const auto& t : transforms) out = t(out, gen);
    return out;
  };
}

TransformOptions TransformOptions::cifar10(bool train) {
  auto options = TransformOptions().mean({0.4914, 0.4822, 0.4465}).std({0.2470, 0.2435, 0.2616});
  if (train) options.crop(32).padding(4).flip(true);
  return options;
}

TransformOptions TransformOptions::fashion_mnist(bool train) {
  auto options = TransformOptions().mean({0.2860}).std({0.3530});
  if (train) options.crop(28).padding(2).flip(true);
  return options;
}

Transform make_transform(const TransformOptions& options) {
  // Raw uint8 images (as the readers return them) become floats in [0, 1] first.
  std::vector<Transform> steps{
      [](const at::Tensor& images, at::Generator&) { return to_float(images); }};
  if (options.crop() > 0) {
    const int64_t size = options.crop(), padding = options.padding();
    steps.push_back([size, padding](const at::Tensor& images, at::Generator& gen) {
      return random_crop(images, size, padding, gen);
    });
  }
  if (options.flip()) {
    steps.push_back([](const at::Tensor& images, at::Generator& gen) {
      return random_horizontal_flip(images, gen);
    });
  }
  if (!options.mean().empty() || !options.std().empty()) {
    const auto mean = options.mean(), std = options.std();
    steps.push_back([mean, std](const at::Tensor& images, at::Generator&) {
      return normalize(images, mean, std);
    });
  }
  return compose(std::move(steps));
}

}  // namespace data
}  // namespace mlo
