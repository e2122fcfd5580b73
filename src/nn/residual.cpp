#include <mlo/nn/residual.h>

#include <mlo/base/error.h>
#include <mlo/nn/batch_norm.h>

#include "init.h"

namespace mlo {
namespace nn {
namespace {

bool needs_shortcut(int64_t in, int64_t out, int64_t stride) { return stride != 1 || in != out; }

void check_sizes(const char* block, int64_t in, int64_t out, int64_t stride, Shortcut shortcut) {
  MLO_CHECK(in > 0 && out > 0, block, ": channels must be positive, got in=", in, " out=", out);
  MLO_CHECK(stride > 0, block, ": stride must be positive, got ", stride);
  MLO_CHECK(shortcut != Shortcut::kZeroPad || out >= in, block,
            ": a zero-pad shortcut cannot shrink channels ", in, " -> ", out,
            "; use Shortcut::kProjection");
}

// Option A: x[:, :, ::stride, ::stride], channels zero-padded to `out` (half before, half after).
torch::Tensor zero_pad_shortcut(const torch::Tensor& x, int64_t out, int64_t stride) {
  torch::Tensor y = x;
  if (stride != 1) {
    y = y.slice(/*dim=*/2, 0, torch::nullopt, stride).slice(/*dim=*/3, 0, torch::nullopt, stride);
  }
  const int64_t extra = out - x.size(1);
  if (extra == 0) return y;
  return torch::constant_pad_nd(y, {0, 0, 0, 0, extra / 2, extra - extra / 2}, /*value=*/0);
}

// The shortcut of a block: identity, option A or option B (the given conv and bn).
torch::Tensor shortcut_of(const torch::Tensor& x, int64_t out, int64_t stride, Shortcut kind,
                          torch::nn::Conv2d& conv, torch::nn::BatchNorm2d& bn) {
  if (!needs_shortcut(x.size(1), out, stride)) return x;
  if (kind == Shortcut::kZeroPad) return zero_pad_shortcut(x, out, stride);
  return batch_norm_forward(*bn, conv->forward(x));
}

// out + shortcut, then the activation; the sum in place on `out` (a batch-norm output nothing
// else saved) with the memory-efficient activation.
torch::Tensor add_activate(torch::Tensor out, const torch::Tensor& shortcut, Activation activation,
                           bool efficient) {
  return activate(efficient ? out.add_(shortcut) : out + shortcut, activation, efficient);
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(const BasicBlockOptions& options_) : options(options_) {
  check_sizes("BasicBlock", options.in_channels(), options.out_channels(), options.stride(),
              options.shortcut());
  reset();
}

void BasicBlockImpl::reset() {
  const int64_t in = options.in_channels(), out = options.out_channels();
  conv1 = register_module("conv1", detail::kaiming_conv(in, out, 3, options.stride()));
  bn1 = register_module("bn1", detail::batch_norm(out));
  conv2 = register_module("conv2", detail::kaiming_conv(out, out, 3, 1));
  bn2 = register_module("bn2", detail::batch_norm(out));
  if (needs_shortcut(in, out, options.stride()) && options.shortcut() == Shortcut::kProjection) {
    shortcut_conv =
        register_module("shortcut_conv", detail::kaiming_conv(in, out, 1, options.stride()));
    shortcut_bn = register_module("shortcut_bn", detail::batch_norm(out));
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  const Activation act = options.activation();
  const bool efficient = options.efficient_activation();
  torch::Tensor out = activate(batch_norm_forward(*bn1, conv1->forward(x)), act, efficient);
  out = batch_norm_forward(*bn2, conv2->forward(out));
  return add_activate(out,
                      shortcut_of(x, options.out_channels(), options.stride(), options.shortcut(),
                                  shortcut_conv, shortcut_bn),
                      act, efficient);
}

void BasicBlockImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::BasicBlock(" << options.in_channels() << ", " << options.out_channels()
         << ", stride=" << options.stride()
         << (options.shortcut() == Shortcut::kZeroPad ? ", shortcut=zero_pad" : "")
         << (options.activation() == Activation::kReLU ? "" : ", swish")
         << (options.efficient_activation() ? ", efficient_activation" : "") << ")";
}

BottleneckImpl::BottleneckImpl(const BottleneckOptions& options_) : options(options_) {
  MLO_CHECK(options.expansion() > 0, "Bottleneck: expansion must be positive, got ",
            options.expansion());
  check_sizes("Bottleneck", options.in_channels(), options.planes(), options.stride(),
              Shortcut::kProjection);
  check_sizes("Bottleneck", options.in_channels(), options.expansion() * options.planes(),
              options.stride(), options.shortcut());
  reset();
}

void BottleneckImpl::reset() {
  const int64_t in = options.in_channels(), planes = options.planes();
  const int64_t out = options.expansion() * planes;
  conv1 = register_module("conv1", detail::kaiming_conv(in, planes, 1, 1));
  bn1 = register_module("bn1", detail::batch_norm(planes));
  conv2 = register_module("conv2", detail::kaiming_conv(planes, planes, 3, options.stride()));
  bn2 = register_module("bn2", detail::batch_norm(planes));
  conv3 = register_module("conv3", detail::kaiming_conv(planes, out, 1, 1));
  bn3 = register_module("bn3", detail::batch_norm(out));
  if (needs_shortcut(in, out, options.stride()) && options.shortcut() == Shortcut::kProjection) {
    shortcut_conv =
        register_module("shortcut_conv", detail::kaiming_conv(in, out, 1, options.stride()));
    shortcut_bn = register_module("shortcut_bn", detail::batch_norm(out));
  }
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  const Activation act = options.activation();
  const bool efficient = options.efficient_activation();
  torch::Tensor out = activate(batch_norm_forward(*bn1, conv1->forward(x)), act, efficient);
  out = activate(batch_norm_forward(*bn2, conv2->forward(out)), act, efficient);
  out = batch_norm_forward(*bn3, conv3->forward(out));
  return add_activate(out,
                      shortcut_of(x, options.expansion() * options.planes(), options.stride(),
                                  options.shortcut(), shortcut_conv, shortcut_bn),
                      act, efficient);
}

void BottleneckImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::Bottleneck(" << options.in_channels() << ", " << options.planes()
         << ", expansion=" << options.expansion() << ", stride=" << options.stride()
         << (options.shortcut() == Shortcut::kZeroPad ? ", shortcut=zero_pad" : "")
         << (options.activation() == Activation::kReLU ? "" : ", swish")
         << (options.efficient_activation() ? ", efficient_activation" : "") << ")";
}

}  // namespace nn
}  // namespace mlo
