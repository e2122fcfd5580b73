#include <mlo/build_config.h>
#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/detail/torch_compat.h>
#include <mlo/memory/precision.h>

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace mlo {
namespace memory {

bool precision_supported(Precision precision, c10::DeviceType device) {
  switch (precision) {
    case Precision::kFP32:
      return true;
    case Precision::kBF16:
      return device == c10::kCPU || (MLO_WITH_CUDA && device == c10::kCUDA);
    case Precision::kFP16:
      return MLO_WITH_CUDA && device == c10::kCUDA;
  }
  return false;
}

namespace {

// Whether the CPU has bf16 arithmetic units that the OS lets programs use.
bool cpu_bf16_units() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  // AVX-512 state (opmask, upper halves of ZMM0-15, ZMM16-31) and AMX tile state enabled.
  const bool avx512_state = (xcr0_low & 0xe6u) == 0xe6u;
  const bool amx_state = (xcr0_low & (3u << 17)) == (3u << 17);
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx & (1u << 22)) != 0;
  const unsigned max_subleaf = eax;
  bool avx512_bf16 = false;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    avx512_bf16 = (eax & (1u << 5)) != 0;
  }
  return (avx512_bf16 && avx512_state) || (amx_bf16 && amx_state);
#elif defined(__aarch64__) && defined(__linux__) && defined(HWCAP2_BF16)
  return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#else
  return false;
#endif
}

// The oneDNN cap of the environment that keeps its kernels below bf16 instructions, or "".
std::string onednn_cap() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    std::string isa(value);
    std::transform(isa.begin(), isa.end(), isa.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    // The ISAs from AVX512_CORE_BF16 up (oneDNN's names); anything else stops below them.
    static const std::array<const char*, 8> kWithBf16 = {
        "ALL", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
        "AVX10_1_512", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16"};
    if (std::find(kWithBf16.begin(), kWithBf16.end(), isa) == kWithBf16.end()) {
      return std::string(name) + "=" + value;
    }
  }
  return "";
}

}  // namespace

bool cpu_has_native_bf16() { return cpu_bf16_shortfall().empty(); }

std::string cpu_bf16_shortfall() {
  static const std::string units =
      cpu_bf16_units() ? "" : "the CPU has no bf16 arithmetic units (AVX512-BF16 or AMX-BF16)";
  if (!units.empty()) return units;
  const std::string cap = onednn_cap();  // (read each time: tests set it)
  return cap.empty() ? "" : cap + " keeps oneDNN's kernels below AVX512_CORE_BF16";
}

AutocastGuard::AutocastGuard(Precision precision, c10::DeviceType device) : device_(device) {
  if (precision == Precision::kFP32) return;
  active_ = true;
  previous_enabled_ = detail::autocast_enabled(device_);
  previous_dtype_ = detail::autocast_dtype(device_);
  detail::set_autocast_dtype(device_, precision == Precision::kBF16 ? c10::kBFloat16 : c10::kHalf);
  detail::set_autocast_enabled(device_, true);
  // NOTE: a region opened inside another (a level's loss evaluated inside a caller's region)
  // starts from an empty cast cache: weights changed in place since the outer region cast them
  // (DARTS, SAMA and L2RW perturb them) must be cast afresh. Casts still in use stay alive
  // through the outer graph; only the cache forgets them.
  if (at::autocast::increment_nesting() > 1) at::autocast::clear_cache();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // NOTE: the cast cache (low-precision copies of the weights) lives until the outermost
  // autocast region ends; freeing it here keeps it out of the next phase's memory.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  detail::set_autocast_enabled(device_, previous_enabled_);
  detail::set_autocast_dtype(device_, previous_dtype_);
}

CastCacheOff::CastCacheOff() : previous_(at::autocast::is_autocast_cache_enabled()) {
  at::autocast::set_autocast_cache_enabled(false);
}

CastCacheOff::~CastCacheOff() { at::autocast::set_autocast_cache_enabled(previous_); }

LossScaler::LossScaler(const LossScaling& options)
    : options_(options), scale_(options.init_scale()) {
  LossScaling copy = options;
  const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
  MLO_CHECK(failed.empty(), "loss_scaling.", failed);
}

at::Tensor LossScaler::scale(const at::Tensor& loss) const { return loss * scale_; }

bool LossScaler::unscale(const std::vector<at::Tensor>& grads) const {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> defined;
  for (const auto& g : grads) {
    if (g.defined()) defined.push_back(g);
  }
  if (defined.empty()) return true;
  const double inverse = 1.0 / scale_;
  const c10::Device device = defined.front().device();
  const bool one_gpu =
      device.is_cuda() && std::all_of(defined.begin(), defined.end(),
                                      [&](const at::Tensor& g) { return g.device() == device; });
  if (MLO_WITH_CUDA && one_gpu) {
    // On one GPU: ATen's fused kernel unscales every gradient and flags a non-finite one in a
    // single pass, and the flag costs one device-to-host read instead of one per tensor.
    // NOTE: the kernel multiplies by a float32 1/scale; scales are powers of two unless
    // init_scale is not, and then 1/scale rounds to float32 (the CPU path below uses double).
    const auto options = at::TensorOptions(at::kFloat).device(device);
    at::Tensor found_inf = at::zeros({1}, options);
    const at::Tensor inv_scale = at::full({1}, inverse, options);
    at::_amp_foreach_non_finite_check_and_unscale_(defined, found_inf, inv_scale);
    return found_inf.item<float>() == 0.0f;
  }
  bool finite = true;
  for (const auto& g : defined) {
    g.mul_(inverse);
    if (finite && !at::isfinite(g).all().item<bool>()) finite = false;
  }
  return finite;
}

void LossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= options_.backoff_factor();
    clean_steps_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++clean_steps_ >= options_.growth_interval()) {
    scale_ *= options_.growth_factor();
    clean_steps_ = 0;
  }
}

void LossScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", c10::IValue(scale_));
  archive.write("clean_steps", c10::IValue(clean_steps_));
  archive.write("skipped_steps", c10::IValue(skipped_steps_));
}

void LossScaler::load(torch::serialize::InputArchive& archive) {
  scale_ = mlo::archive::read_double(archive, "scale", "loss scaler");
  clean_steps_ = mlo::archive::read_int(archive, "clean_steps", "loss scaler");
  skipped_steps_ = mlo::archive::read_int(archive, "skipped_steps", "loss scaler");
}

}  // namespace memory
}  // namespace mlo
