#include <mlo/build_config.h>
#include <mlo/base/error.h>
#include <mlo/detail/torch_compat.h>
#include <mlo/memory/meter.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#if MLO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace mlo {
namespace memory {
namespace {

// Receives every CPU allocation and free of the threads where it is installed.
class Reporter : public c10::MemoryReportingInfoBase {
 public:
  explicit Reporter(MemoryMeter* meter) : meter_(meter) {}
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size,
                         mlo::detail::MemoryReportTotal /*total_allocated*/,
                         mlo::detail::MemoryReportTotal /*total_reserved*/,
                         c10::Device device) override {
    if (device.is_cpu()) meter_->record(alloc_size);
  }
  bool memoryProfilingEnabled() const override { return true; }

 private:
  MemoryMeter* meter_;
};

#if MLO_WITH_CUDA
// Allocated bytes of a CUDA device (current, peak since the last reset), less `origin` (what
// was allocated when the meter started: as on the CPU, the meter counts what was allocated
// while it meters), and its reserved peak (absolute: what nvidia-smi users compare).
struct CudaStats {
  int64_t current = 0, peak = 0, reserved_peak = 0;
};
CudaStats cuda_stats(const c10::Device& device, int64_t origin) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  // NOTE: element 0 is StatType::AGGREGATE (all pools) in every LibTorch; the enum itself moved
  // out of c10::cuda::CUDACachingAllocator in 2.x (to c10::CachingDeviceAllocator, then
  // c10::CachingAllocator), so it is not named here.
  const auto& allocated = stats.allocated_bytes[0];
  return {allocated.current - origin, allocated.peak - origin, stats.reserved_bytes[0].peak};
}
#endif


}  // namespace

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kData:
      return "data";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kHypergradient:
      return "hypergradient";
    case Phase::kStep:
      return "step";
  }
  return "unknown";
}

double to_mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

MemoryMeter::MemoryMeter(c10::Device device) : device_(device) {
  MLO_CHECK(device.is_cpu() || (MLO_WITH_CUDA && device.is_cuda()),
            "MemoryMeter: cannot meter device ", device.str(),
            MLO_WITH_CUDA ? " (CPU and CUDA only)" : " (this build of mlo has no CUDA)");
  reporter_ = std::make_shared<Reporter>(this);
#if MLO_WITH_CUDA
  if (device_.is_cuda()) {
    origin_ = cuda_stats(device_, 0).current;
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
  }
#endif
}

MemoryMeter::~MemoryMeter() = default;

MemoryMeter::Active::Active(MemoryMeter& meter) {
  if (meter.device_.is_cpu()) {
    guard_ =
        std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, meter.reporter_);
  }
}

MemoryMeter::Active::~Active() = default;

MemoryMeter::Scope::Scope(MemoryMeter* meter, const std::string& owner, const char* phase)
    : meter_(meter) {
  if (meter_) meter_->enter(owner, phase);
}

MemoryMeter::Scope::Scope(Scope&& other) noexcept : meter_(other.meter_) { other.meter_ = nullptr; }

MemoryMeter::Scope::~Scope() { close(); }

int64_t MemoryMeter::Scope::close() {
  if (!meter_) return 0;
  const int64_t peak = meter_->leave();
  meter_ = nullptr;
  return peak;
}

void MemoryMeter::record(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  current_ += bytes;
  if (current_ > peak_) peak_ = current_;
  for (auto& open : open_) open.peak = std::max(open.peak, current_);
}

void MemoryMeter::sync_device() {
#if MLO_WITH_CUDA
  // Fold the allocator's peak since the last reset into every open scope, then reset it, so
  // that nested scopes each see their own maximum.
  if (!device_.is_cuda()) return;
  const CudaStats stats = cuda_stats(device_, origin_);
  current_ = stats.current;
  peak_ = std::max(peak_, stats.peak);
  reserved_peak_ = std::max(reserved_peak_, stats.reserved_peak);
  for (auto& open : open_) open.peak = std::max(open.peak, stats.peak);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
#endif
}

void MemoryMeter::enter(const std::string& owner, const std::string& phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_device();
  open_.push_back(Open{owner, phase, current_, current_});
}

int64_t MemoryMeter::leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_device();
  MLO_INTERNAL_ASSERT(!open_.empty(), "memory scope closed twice");
  const Open open = open_.back();
  open_.pop_back();
  ScopeStats& stats = stats_[{open.owner, open.phase}];
  ++stats.count;
  stats.peak = std::max(stats.peak, open.peak);
  stats.peak_delta = std::max(stats.peak_delta, open.peak - open.entry);
  stats.last_peak = open.peak;
  return open.peak;
}

int64_t MemoryMeter::current() const {
  std::lock_guard<std::mutex> lock(mutex_);
#if MLO_WITH_CUDA
  if (device_.is_cuda()) return cuda_stats(device_, origin_).current;
#endif
  return current_;
}

int64_t MemoryMeter::reserved_peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
#if MLO_WITH_CUDA
  if (device_.is_cuda()) {
    return std::max(reserved_peak_, cuda_stats(device_, origin_).reserved_peak);
  }
#endif
  return reserved_peak_;
}

int64_t MemoryMeter::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
#if MLO_WITH_CUDA
  if (device_.is_cuda()) return std::max(peak_, cuda_stats(device_, origin_).peak);
#endif
  return peak_;
}

void MemoryMeter::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
#if MLO_WITH_CUDA
  if (device_.is_cuda()) {
    current_ = cuda_stats(device_, origin_).current;
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
  }
#endif
  peak_ = current_;
  for (auto& open : open_) open.peak = std::max(open.peak, current_);
}

void MemoryMeter::reset() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.clear();
  }
  reset_peak();
}

std::map<std::pair<std::string, std::string>, ScopeStats> MemoryMeter::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::string MemoryMeter::table() const {
  const auto all = stats();
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-16s %-14s %8s %12s %12s %12s\n", "owner", "phase", "count",
                "peak MiB", "own MiB", "last MiB");
  out << line;
  for (const auto& [key, s] : all) {
    std::snprintf(line, sizeof(line), "%-16s %-14s %8lld %12.3f %12.3f %12.3f\n", key.first.c_str(),
                  key.second.c_str(), static_cast<long long>(s.count), to_mib(s.peak),
                  to_mib(s.peak_delta), to_mib(s.last_peak));
    out << line;
  }
  std::snprintf(line, sizeof(line), "overall peak %.3f MiB on %s (current %.3f MiB)\n",
                to_mib(peak()), device_.str().c_str(), to_mib(current()));
  out << line;
  return out.str();
}

std::string MemoryMeter::json() const {
  nlohmann::ordered_json out;
  out["device"] = device_.str();
  out["peak_bytes"] = peak();
  out["current_bytes"] = current();
  out["scopes"] = nlohmann::ordered_json::array();
  for (const auto& [key, s] : stats()) {
    out["scopes"].push_back({{"owner", key.first},
                             {"phase", key.second},
                             {"count", s.count},
                             {"peak_bytes", s.peak},
                             {"own_peak_bytes", s.peak_delta},
                             {"last_peak_bytes", s.last_peak}});
  }
  // NOTE: names are user strings; bytes that are not UTF-8 become U+FFFD instead of throwing.
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int64_t retained_bytes(const std::function<at::Tensor(const at::Tensor&)>& fn,
                       const at::Tensor& sample) {
  MLO_CHECK(sample.defined(), "retained_bytes: undefined sample");
  const at::Tensor input =
      at::randn(sample.sizes(), sample.options().dtype(at::kFloat)).requires_grad_(true);
  MemoryMeter meter(sample.device());
  MemoryMeter::Active on(meter);
  at::AutoGradMode grad_mode(true);
  const int64_t before = meter.current();
  const at::Tensor out = fn(input);
  return meter.current() - before;
}

}  // namespace memory
}  // namespace mlo
