#pragma once
/// \file
/// Batch transforms for image classification: random crop with reflect padding, random
/// horizontal flip, per-channel normalization, and the CIFAR-10 / Fashion-MNIST presets.
/// They act on a whole N x C x H x W float batch and draw randomness only from the generator they
/// are given, so a seeded generator makes them deterministic.

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace mlo {
namespace data {

/// A batch transform: images (N x C x H x W, float) and a generator in, images out.
using Transform = std::function<at::Tensor(const at::Tensor& images, at::Generator& generator)>;

/// uint8 images to float in [0, 1]; float images unchanged; other types converted to float.
at::Tensor to_float(const at::Tensor& images);

/// Pads every image by `padding` pixels on each side, reflecting the border (the edge pixel is
/// not repeated: `dcb|abcd|cba`), then cuts a `size` x `size` window at a random offset, drawn
/// per image uniformly in 0 .. H + 2*padding - size (and likewise for the width).
at::Tensor random_crop(const at::Tensor& images, int64_t size, int64_t padding,
                       at::Generator& generator);

/// Mirrors each image left-right with probability `p`, independently per image.
at::Tensor random_horizontal_flip(const at::Tensor& images, at::Generator& generator,
                                  double p = 0.5);

/// (x - mean[c]) / std[c] for every channel c; `mean` and `std` have one value per channel.
at::Tensor normalize(const at::Tensor& images, const std::vector<double>& mean,
                     const std::vector<double>& std);

/// Applies the transforms in order.
Transform compose(std::vector<Transform> transforms);

/// Which augmentations and normalization to apply; `make_transform` builds the function.
/// Example: `make_transform(TransformOptions::cifar10(/*train=*/true))`.
struct TransformOptions {
  /// CIFAR-10: train = 32x32 crop with 4-pixel reflect padding + flip; both normalize with means
  /// (0.4914, 0.4822, 0.4465) and stds (0.2470, 0.2435, 0.2616).
  static TransformOptions cifar10(bool train);
  /// Fashion-MNIST: train = 28x28 crop with 2-pixel reflect padding + flip; both normalize with
  /// mean 0.2860 and std 0.3530.
  static TransformOptions fashion_mnist(bool train);

  /// Random crop to `crop` x `crop` after `padding` pixels of reflect padding (0: no crop).
  TORCH_ARG(int64_t, crop) = 0;
  /// Pixels of reflect padding on each side before the crop (used only when `crop` > 0).
  TORCH_ARG(int64_t, padding) = 0;
  /// Random horizontal flip with probability 0.5.
  TORCH_ARG(bool, flip) = false;
  /// Per-channel normalization (empty: none).
  TORCH_ARG(std::vector<double>, mean) = {};
  /// Per-channel standard deviations, each > 0: images become (x - mean) / std. `mean` and
  /// `std` need one value per channel once either is set.
  TORCH_ARG(std::vector<double>, std) = {};
};

/// The transform `options` describe: crop, then flip, then normalize.
/// The images are first made floats in [0, 1] (`to_float`), then cropped, flipped, normalized.
Transform make_transform(const TransformOptions& options);

}  // namespace data
}  // namespace mlo
