// One ablation row measured in this process (run/ablation.h: measure_ablation_row): the exact
// meter's peak, the process's resident memory, the time per meta-iteration and the analytic
// floor. run/ablation.cpp chooses the rows and runs them (here, or one process per rank).
#include <mlo/run/ablation.h>

#include "ablation_sampling.h"

#include <mlo/base/error.h>
#include <mlo/io/yaml.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>
#include <mlo/run/experiment.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mlo {
namespace run {
namespace detail {

std::optional<Batch> try_sample_batch(Experiment& experiment, const std::string& name) {
  try {
    return experiment.sample_batch(name);
  } catch (const Error&) {
    return std::nullopt;
  }
}


}  // namespace detail

namespace {

// A field of /proc/self/status ("VmRSS", "VmHWM") in bytes; 0 where there is no such file.
int64_t proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream values(line.substr(field.size() + 1));
    int64_t kib = 0;
    values >> kib;
    return kib * 1024;
  }
  return 0;
}

// Gives freed heap memory back to the system and restarts the peak-RSS count (VmHWM) at the
// current RSS, so each row's peak is its own (Linux >= 4.0: clear_refs "5").
void reset_rss_peak() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  std::ofstream clear("/proc/self/clear_refs");
  if (clear) clear << "5";
}

// Bytes of every parameter and buffer of every problem's module (storages counted once).
int64_t state_bytes(Engine& engine) {
  std::set<const void*> seen;
  int64_t total = 0;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined() || !seen.insert(t.storage().data()).second) return;
    total += static_cast<int64_t>(t.storage().nbytes());
  };
  for (const auto& problem : engine.problems()) {
    for (const auto& p : problem->module().parameters()) add(p);
    for (const auto& b : problem->module().buffers()) add(b);
  }
  return total;
}

// Smallest activation memory of any single-recomputation checkpointing plan for `chain` on
// batches shaped like `sample` under `precision` (parameter gradients excluded: the footprint
// counts them).
int64_t min_activation_bytes(nn::ChainImpl& chain, const at::Tensor& sample, Precision precision) {
  std::optional<memory::AutocastGuard> autocast;
  if (precision != Precision::kFP32) autocast.emplace(precision, sample.device().type());
  const auto model = memory::CostModel().keep_param_grads(false);
  const auto profile = memory::profile_chain(chain, sample);
  const auto plan =
      memory::solve_min_memory(profile, std::numeric_limits<double>::infinity(), model);
  return memory::evaluate(profile, plan, model).peak_bytes;
}

// Measurement only: memory tracking on; no validation, logging or saving inside the loop.
std::vector<std::string> with_measuring(std::vector<std::string> overrides) {
  for (const char* set : {"engine.track_memory=true", "engine.valid_step=0", "engine.log_step=0",
                          "engine.save_step=0"}) {
    overrides.emplace_back(set);
  }
  return overrides;
}

}  // namespace

AblationRowResult measure_ablation_row(const std::string& config_path,
                                       const std::vector<std::string>& all_overrides,
                                       const std::string& problem_option, int64_t iterations) {
  AblationRowResult result;
  const std::vector<std::string> overrides = with_measuring(all_overrides);
  reset_rss_peak();
  const int64_t rss_start = proc_status_bytes("VmRSS");
  {
    const RunConfig config = io::load_run_config(config_path, overrides);
    auto experiment = make_experiment(config);
    Engine& engine = experiment->engine();
    engine.initialize();
    for (const auto& p : engine.problems()) p->train();
    const std::string problem_name =
        problem_option.empty() ? experiment->default_problem() : problem_option;
    auto problem = experiment->problem(problem_name);
    const ProblemConfig& pc = problem->config();
    result.steps_per_iteration = pc.unroll_steps() * pc.gradient_accumulation();

    for (int64_t s = 0; s < result.steps_per_iteration; ++s) engine.step();  // warm-up
    double seconds = 0;
    int64_t meter_peak = 0;
    for (int64_t i = 0; i < iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < result.steps_per_iteration; ++s) {
        engine.step();
        meter_peak = std::max(meter_peak, engine.last_step_peak_bytes());
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    result.rss_peak_bytes = proc_status_bytes("VmHWM");
    if (const auto* meter = engine.memory_meter()) result.reserved_peak_bytes = meter->reserved_peak();
    result.seconds = seconds / static_cast<double>(iterations);
    result.state_bytes = state_bytes(engine);
    result.peak_bytes = result.state_bytes + meter_peak;
    if (const auto* plan = engine.checkpoint_plan(*problem)) {
      result.plan = std::to_string(plan->num_checkpointed()) + " checkpointed segment(s) of " +
                    std::to_string(plan->block_names.size()) + " blocks";
    }

    // The floor: every level's parameters, gradients and optimizer state, plus the least
    // activation memory of the varied problem's model on the largest batch it sees (its own
    // micro-batch, or an upper problem's batch run through it).
    // NOTE: mlo frees gradients after each optimizer step, so the footprint between steps has
    // none; the floor counts one gradient per trainable parameter, as any step needs them.
    for (const auto& p : engine.problems()) {
      const auto fp = p->footprint();
      result.footprint_bytes += fp.parameters + fp.optimizer_state;
      for (const auto& t : p->module().parameters()) {
        if (t.requires_grad()) result.footprint_bytes += t.numel() * t.element_size();
      }
    }
    const Batch own = experiment->sample_batch(problem_name);
    result.micro_batch = own.size();
    if (auto* chain = dynamic_cast<nn::ChainImpl*>(&problem->module())) {
      int64_t largest = 0;
      for (const auto& p : engine.problems()) {
        const auto sampled =
            p.get() == problem.get() ? std::optional<Batch>(own) : detail::try_sample_batch(*experiment, p->name());
        if (!sampled) continue;
        const Batch& batch = *sampled;
        if (batch.data.dim() != own.data.dim() ||
            batch.data.sizes().slice(1) != own.data.sizes().slice(1)) {
          continue;  // not input of this model
        }
        // The batch runs through the model at the precision of the problem that runs it.
        largest = std::max(largest,
                           min_activation_bytes(*chain, batch.data, p->config().precision()));
      }
      result.min_activation_bytes = largest;
    }
    result.floor_bytes = result.footprint_bytes + result.min_activation_bytes;
  }
  result.rss_growth_bytes = result.rss_peak_bytes - rss_start;
  return result;
}

}  // namespace run
}  // namespace mlo
