#pragma once
// Internal to run/ (not installed): what the ablation's files share. The lookup of an
// experiment's sample batch, the overrides of a measuring run, and the timing rounds
// (ablation_timing.cpp) that run/ablation.cpp calls after the memory measurements.

#include <mlo/core/batch.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlo {

class Engine;
class Problem;

namespace run {

class MemoryTarget;
struct AblationResult;

namespace detail {

/// A training batch of problem `name`, or nothing when the experiment gives none for it.
std::optional<Batch> try_sample_batch(MemoryTarget& experiment, const std::string& name);

/// `overrides` and those of a measuring run of `config_path`: no validation, logging or saving
/// inside the loop, the exact meter on or off, and a run length in which every level takes an
/// optimizer step (the configured one when it does). Throws `mlo::Error` for a configuration
/// that cannot run.
std::vector<std::string> measuring_overrides(const std::string& config_path,
                                             std::vector<std::string> overrides,
                                             bool track_memory);

/// The most meta-iterations a warm-up or a measured window runs while waiting for every level
/// to take an optimizer step (a level that never steps, such as one with frozen weights, would
/// otherwise hold it forever).
inline constexpr int64_t kMaxWindow = 64;

/// Runs whole meta-iterations (`steps_per_iteration` global steps each) of `engine`, at least
/// one, until every problem has taken an optimizer step (a level accumulating over several of
/// its steps needs several); returns how many it ran.
int64_t warm_up(Engine& engine, int64_t steps_per_iteration);

/// Waits for `device`'s queued kernels (a no-op on the CPU), so a wall-clock reading after it
/// includes them.
void synchronize(const c10::Device& device);

/// The median of `values` (the mean of the middle two for an even count), as the timing rounds
/// form a row's time and ratio. Throws `mlo::Error` for no values.
double median(std::vector<double> values);

/// What `time_interleaved` measured.
struct TimedRounds {
  /// [row][round]: one meta-iteration's wall time (the median of `samples[row][round]`)
  std::vector<std::vector<double>> seconds;
  /// [row][round]: each meta-iteration's wall time in that round, in the order they ran.
  std::vector<std::vector<std::vector<double>>> samples;
  /// [round]: the rows' indices in the order their meta-iterations ran.
  std::vector<std::vector<std::size_t>> order;
  std::vector<std::string> plans;            ///< per row: its checkpointing plan ("" for none)
  /// Per row: why it is not in the rounds ("" when it is; its seconds are then 0).
  std::vector<std::string> errors;
  /// Whether freed heap memory was kept for reuse during the rounds (memory::HeapReuse).
  bool heap_reuse = false;
};

/// Builds one experiment per entry of `row_overrides` (memory tracking off), all alive at once,
/// warms each up by one meta-iteration of `problem` ("" = the default problem), then runs
/// `rounds` rounds; round r times `per_round[k]` meta-iterations of every row k, one at a time,
/// in passes: each pass times one meta-iteration of every row whose `row_passes` include it,
/// row r modulo the rows' count first (each row takes each place in turn, so drifting machine
/// load hits all alike); a row's round time is the median of its meta-iterations there.
/// `names` label the progress lines. Throws when the first row (the reference) cannot be built;
/// another row that cannot is left out of the rounds with its error.
TimedRounds time_interleaved(const std::string& config_path,
                             const std::vector<std::vector<std::string>>& row_overrides,
                             const std::vector<std::string>& names, const std::string& problem,
                             int64_t rounds, const std::vector<int64_t>& per_round,
                             const std::function<void(const std::string&)>& progress);

/// Which of a round's `passes` passes a row with `count` meta-iterations runs in: `count` of
/// them (at least 1, at most `passes`), the j-th in the middle of the j-th of `count` equal
/// stretches of the round. Throws `mlo::Error` for `passes` < 1.
std::vector<bool> row_passes(int64_t count, int64_t passes);

/// Whole meta-iterations that take at least `round_seconds` at `seconds_each` apiece: at least
/// one, at most 1000 (AblationOptions::round_seconds).
int64_t iterations_per_round(double round_seconds, double seconds_each);

/// The timing rounds of `run_ablation`: every single-process row of `result` timed against the
/// baseline by `time_interleaved`; each row's time and time ratio replaced by the rounds'
/// figures (a row left out keeps its measured ones, and `result.timing_error` says why).
void time_in_rounds(const std::string& config_path, const std::vector<std::string>& overrides,
                    int64_t rounds, double round_seconds,
                    const std::function<void(const std::string&)>& progress,
                    AblationResult& result);

/// The baseline (`base_overrides`: the user's and its own) measured again in this process for
/// the rows of several ranks around it (AblationRowResult::baseline_before_seconds): its first
/// `options.rounds()` metered meta-iterations, or none when it fails (the row then takes the
/// other bracket alone, or with neither the baseline's first measurement); the failure is
/// added to `result.timing_error`. `when` ("before +ZeRO-2, ...") labels progress and error.
std::vector<double> measure_bracket(const std::string& config_path,
                                    const std::vector<std::string>& base_overrides,
                                    const AblationOptions& options, const std::string& when,
                                    const std::function<void(const std::string&)>& progress,
                                    AblationResult& result);

/// The rows of several ranks: their time and ratio from the median of their first `rounds`
/// metered meta-iterations and that of the baseline's measured just before and just after them
/// (AblationRowResult::baseline_before_seconds, pooled); where neither bracket holds `rounds`,
/// the baseline row's own first `rounds` metered meta-iterations.
void time_own_processes(int64_t rounds, AblationResult& result);

/// One line describing a checkpointing plan ("" when `problem`'s model has none).
std::string plan_line(const Engine& engine, const Problem& problem);

}  // namespace detail
}  // namespace run
}  // namespace mlo
