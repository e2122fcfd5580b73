#pragma once
/// \file
/// Mixed precision per level: an autocast guard for a level's forward and loss, and a dynamic
/// loss scaler for fp16 (portable: ordinary ops only, so it also runs on CPU).

#include <mlo/memory/options.h>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {
namespace memory {

/// Whether `precision` can run on `device` in this build: fp32 always; bf16 on CPU and, in CUDA
/// builds, on CUDA; fp16 only on CUDA (LibTorch's CPU autocast has no fp16).
bool precision_supported(Precision precision, c10::DeviceType device);

/// Whether this machine's CPU computes in bf16 natively: x86 with AVX512-BF16 or AMX-BF16 (or an
/// Arm CPU with the BF16 extension), and oneDNN not capped below them (`ONEDNN_MAX_CPU_ISA`,
/// `DNNL_MAX_CPU_ISA`). Without it, LibTorch's CPU kernels convert bf16 to fp32 and back inside
/// every operation: bf16 autocast still trains correctly, but runs several times slower than
/// fp32 and may take more memory, not less (docs/memory.md).
bool cpu_has_native_bf16();

/// Why `cpu_has_native_bf16()` is false ("the CPU has no AVX512-BF16 or AMX-BF16 units",
/// "ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below AVX512_CORE_BF16"), or "" when it is true.
std::string cpu_bf16_shortfall();

/// Enables autocast to the precision's dtype on `device` while alive (no-op for fp32), and
/// restores the previous autocast state afterwards. Nestable; a nested region starts with an
/// empty weight-cast cache (see `CastCacheOff`), and the outermost one clears it when it ends.
class AutocastGuard {
 public:
  /// Enters autocast to `precision` (bf16 or fp16) on `device`; fp32 does nothing.
  AutocastGuard(Precision precision, c10::DeviceType device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_ = c10::kCPU;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::kFloat;
};

/// Turns off autocast's cache of low-precision weight casts while alive, and restores the
/// previous setting afterwards. Nestable.
///
/// Inside an autocast region LibTorch casts a float weight that requires grad once and reuses
/// the cast until the region ends. A cast made under no_grad has no autograd history, and a cast
/// made before the weight changed in place holds the old values; a later forward of the same
/// weight in the same region would reuse it, so the weight gets no gradient or the change is
/// invisible. Passes without a graph inside a region (a checkpointed segment's forward,
/// profiling, re-evaluations) and passes at weights changed in place (look-aheads) run under
/// this guard:
///
/// ```
/// memory::AutocastGuard autocast(Precision::kBF16, c10::kCPU);
/// {
///   memory::CastCacheOff no_cache;
///   torch::NoGradGuard no_grad;
///   probe = model->forward(x);       // casts made here are not kept
/// }
/// loss = model->forward(x).sum();    // casts with history: every weight gets its gradient
/// ```
class CastCacheOff {
 public:
  /// Turns autocast's cast cache off until the destructor.
  CastCacheOff();
  /// Restores the cache's setting from before the constructor.
  ~CastCacheOff();
  CastCacheOff(const CastCacheOff&) = delete;
  CastCacheOff& operator=(const CastCacheOff&) = delete;

 private:
  bool previous_ = true;
};

/// Dynamic loss scaling (as in mixed-precision training): the loss is multiplied by `scale()`;
/// before the optimizer step the gradients are divided by it and checked. On inf/nan the step is
/// skipped and the scale is multiplied by `backoff_factor`; after `growth_interval` clean steps
/// in a row it is multiplied by `growth_factor`.
class LossScaler {
 public:
  /// Starts at `init_scale`; throws `mlo::Error` for an option out of its range.
  explicit LossScaler(const LossScaling& options);
  /// The current scale.
  double scale() const { return scale_; }
  /// `loss * scale()`.
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides every defined gradient by the scale in place; returns true when all are finite.
  /// Gradients all on one GPU go through ATen's fused `_amp_foreach_non_finite_check_and_unscale_`
  /// (one pass, one flag read back); others through ordinary ops.
  /// The scale itself is a host number: the hypergradient methods divide by it exactly, and
  /// `update` is scalar logic on the host (the equivalent of `_amp_update_scale_`, whose device
  /// tensor would have to be read back each step for the skip decision anyway).
  bool unscale(const std::vector<at::Tensor>& grads) const;
  /// Adjusts the scale after a step whose gradients were (not) finite.
  void update(bool finite);
  /// Consecutive clean steps since the last change of scale.
  int64_t clean_steps() const { return clean_steps_; }
  /// Steps skipped for inf/nan so far.
  int64_t skipped_steps() const { return skipped_steps_; }

  /// The scale, the steps since the last overflow and the skip count, for resume.
  void save(torch::serialize::OutputArchive& archive) const;
  /// Restores what `save` wrote.
  void load(torch::serialize::InputArchive& archive);

 private:
  LossScaling options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace memory
}  // namespace mlo
