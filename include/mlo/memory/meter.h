#pragma once
/// \file
/// Exact tensor-memory meter. On CPU it sees every tensor allocation and free of the metering
/// thread (and of the autograd work it runs) through c10's memory-reporting hook; in CUDA builds
/// it reads the caching allocator's statistics for CUDA devices. Counts are bytes of tensor
/// storage allocated while metering and still alive ("current"), and their maximum ("peak").
///
/// ```
/// mlo::memory::MemoryMeter meter;
/// {
///   mlo::memory::MemoryMeter::Active on(meter);      // meter this thread
///   auto scope = meter.scope("inner", "forward");    // attribute a peak to (owner, phase)
///   auto y = model->forward(x);
/// }
/// spdlog::info("{}", meter.table());
/// ```

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace c10 {
class DebugInfoBase;
class DebugInfoGuard;
}  // namespace c10

namespace mlo {
namespace memory {

/// Phases of a problem's step that the engine meters.
enum class Phase { kData, kForward, kBackward, kHypergradient, kStep };
/// The phase's name in reports: "data", "forward", "backward", "hypergradient", "step".
const char* to_string(Phase phase);

/// Statistics of one (owner, phase) scope over all its occurrences.
struct ScopeStats {
  int64_t count = 0;       ///< times the scope was entered
  int64_t peak = 0;        ///< highest current bytes seen inside it
  int64_t peak_delta = 0;  ///< highest (peak - current at entry): the scope's own transient
  int64_t last_peak = 0;   ///< peak of the latest occurrence
};

/// Bytes as MiB, for reports.
double to_mib(int64_t bytes);

/// Exact byte accounting of tensor allocations (docs/memory.md): current and peak bytes overall,
/// per (owner, phase) scope and per meta-iteration. Attach it with `Active` on the thread that
/// allocates; the Engine opens the scopes of each problem's phases.
class MemoryMeter {
 public:
  /// Meters `device`: CPU, or (CUDA builds only) a CUDA device. On both, the counts start at 0:
  /// what was allocated before the meter existed (a model's parameters) is not in them. On CUDA
  /// they come from the caching allocator's statistics (allocated bytes, with its peak reset at
  /// every scope boundary), so every allocation on the device counts, from any thread.
  explicit MemoryMeter(c10::Device device = c10::Device(c10::kCPU));
  ~MemoryMeter();
  MemoryMeter(const MemoryMeter&) = delete;
  MemoryMeter& operator=(const MemoryMeter&) = delete;

  /// Meters the current thread while alive (CPU); nestable with other meters' `Active`s only in
  /// LIFO order.
  class Active {
   public:
    /// Starts metering this thread's allocations into `meter` (CPU meters; a CUDA meter counts
    /// every allocation anyway and needs none).
    explicit Active(MemoryMeter& meter);
    ~Active();
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    std::unique_ptr<c10::DebugInfoGuard> guard_;
  };

  /// Attributes the peak reached while alive to (owner, phase). Nestable.
  class Scope {
   public:
    /// Costs nothing (no string copies) when `meter` is null.
    Scope(MemoryMeter* meter, const std::string& owner, const char* phase);
    ~Scope();
    /// Takes over `other`'s open scope; `other` no longer closes it.
    Scope(Scope&& other) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    /// Closes the scope now and returns its peak (0 for a scope without a meter).
    int64_t close();

   private:
    MemoryMeter* meter_;
  };
  /// A scope; `meter` may be null (then it does nothing), so callers need no branches.
  static Scope scope(MemoryMeter* meter, const std::string& owner, const char* phase) {
    return Scope(meter, owner, phase);
  }
  /// A scope of this meter, attributed to (owner, phase).
  Scope scope(const std::string& owner, const std::string& phase) {
    return Scope(this, owner, phase.c_str());
  }

  /// Bytes allocated while metering and not yet freed.
  int64_t current() const;
  /// Highest `current()` since construction or the last `reset_peak()`.
  int64_t peak() const;
  /// CUDA: the caching allocator's highest reserved bytes (allocated plus its cache; the
  /// figure nvidia-smi users compare, less the CUDA context) seen while metering. 0 on CPU.
  int64_t reserved_peak() const;
  /// Sets the peak to the current value.
  void reset_peak();
  /// Clears the per-scope statistics and resets the peak.
  void reset();
  /// The device metered.
  const c10::Device& device() const { return device_; }

  /// Per (owner, phase) statistics, ordered by owner then phase name.
  std::map<std::pair<std::string, std::string>, ScopeStats> stats() const;
  /// A fixed-width text table of `stats()` (MiB), plus the overall peak.
  std::string table() const;
  /// The same as JSON: {"device":..., "peak_bytes":..., "scopes":[{"owner":...}, ...]}.
  std::string json() const;

  /// Called by the allocator hook (CPU): `bytes` > 0 for an allocation, < 0 for a free.
  void record(int64_t bytes);

 private:
  struct Open {
    std::string owner, phase;
    int64_t entry = 0;
    int64_t peak = 0;
  };
  void enter(const std::string& owner, const std::string& phase);
  int64_t leave();  // returns the closed scope's peak
  void sync_device();

  c10::Device device_;
  mutable std::mutex mutex_;
  int64_t current_ = 0;
  int64_t origin_ = 0;  // CUDA: the allocator's allocated bytes when metering began
  int64_t peak_ = 0;
  int64_t reserved_peak_ = 0;
  std::vector<Open> open_;
  std::map<std::pair<std::string, std::string>, ScopeStats> stats_;
  std::shared_ptr<c10::DebugInfoBase> reporter_;  // the c10 hook object (CPU)
};

/// Bytes `fn(x)` keeps alive for backward on a float input shaped like `sample` that requires
/// grad, output included, input excluded (exact meter, on `sample`'s device). Example:
/// `retained_bytes([](const torch::Tensor& x) { return torch::silu(x); }, torch::randn({256}))`.
int64_t retained_bytes(const std::function<at::Tensor(const at::Tensor&)>& fn,
                       const at::Tensor& sample);

}  // namespace memory
}  // namespace mlo
