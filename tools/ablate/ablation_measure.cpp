// One ablation row measured in this process (run/ablation.h: measure_ablation_row): the exact
// meter's peak, the process's resident memory, the time per meta-iteration and the floor (a
// lower bound of the peak). run/ablation.cpp chooses the rows and runs them (here, or one process
// per rank).
#include "ablation.h"

#include "ablation_detail.h"

#include <mlo/base/error.h>
#include <mlo/build_config.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>
#include <mlo/run/builders.h>
#include <mlo/run/config.h>
#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/run/yaml.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#if MLO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

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

std::optional<Batch> try_sample_batch(MemoryTarget& experiment, const std::string& name) {
  try {
    return experiment.sample_batch(name);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<std::string> measuring_overrides(const std::string& config_path,
                                             std::vector<std::string> overrides,
                                             bool track_memory) {
  overrides.emplace_back(std::string("engine.track_memory=") + (track_memory ? "true" : "false"));
  for (const char* set : {"engine.valid_step=0", "engine.log_step=0", "engine.save_step=0"}) {
    overrides.emplace_back(set);
  }
  // The harness steps the engine itself (warm-up and windows, at most kMaxWindow meta-
  // iterations), never Engine::run(): the configured run length stands, unless a row (more
  // accumulation) leaves a level without an optimizer step in it, which the configuration
  // check refuses. Then it becomes the shortest power of two in which every level steps.
  // (Not simply a large number: an experiment may train something for train_iters steps when
  // it is built, as the HPO experiment trains its frozen baseline.)
  try {
    load_run_config(config_path, overrides);
    return overrides;
  } catch (const Error&) {
  }
  std::vector<std::string> longer = overrides;
  longer.emplace_back("engine.train_iters=1000000");
  RunConfig config = load_run_config(config_path, longer);  // (any other error: named here)
  for (int64_t steps = 1; steps <= 1000000; steps *= 2) {
    config.engine.train_iters(steps);
    const auto counts = optimizer_steps(config);
    if (std::all_of(counts.begin(), counts.end(), [](const auto& c) { return c.second > 0; })) {
      overrides.emplace_back("engine.train_iters=" + std::to_string(steps));
      return overrides;
    }
  }
  longer.pop_back();
  load_run_config(config_path, longer);  // throws the configuration check's own error
  return overrides;
}

int64_t warm_up(Engine& engine, int64_t steps_per_iteration) {
  int64_t done = 0;
  const auto all_stepped = [&engine] {
    for (const auto& p : engine.problems()) {
      if (p->optimizer_steps() == 0) return false;
    }
    return true;
  };
  do {
    for (int64_t s = 0; s < steps_per_iteration; ++s) engine.step();
    ++done;
  } while (!all_stepped() && done < kMaxWindow);
  return done;
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

std::string plan_line(const Engine& engine, const Problem& problem) {
  const auto* plan = engine.checkpoint_plan(problem);
  if (plan == nullptr) return "";
  return std::to_string(plan->num_checkpointed()) + " checkpointed segment(s) of " +
         std::to_string(plan->block_names.size()) + " blocks" +
         (plan->fallback.empty() ? "" : " (" + plan->fallback + ")");
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

// Gives freed heap memory back to the system, and on the GPU the caching allocator's cached
// blocks back to the driver: a row's reserved peak (reset when its meter starts) is then not an
// earlier row's, and a process of several ranks started next finds the GPU free.
void release_cached_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
#if MLO_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

// release_cached_memory, and restarts the peak-RSS count (VmHWM) at the current RSS, so each
// row's peak is its own (Linux >= 4.0: clear_refs "5").
void reset_rss_peak() {
  release_cached_memory();
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
    // (zero3: the module's sharded parameters are empty between uses; the shards hold them)
    if (engine.level(*problem).shards_parameters()) {
      for (const auto& s : problem->parameters()) add(s);
    }
    for (const auto& b : problem->module().buffers()) add(b);
  }
  return total;
}

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += static_cast<int64_t>(t.numel()) * t.element_size();
  return total;
}

// What one forward of `chain` on `input` holds, run as the row runs it: through the chain's
// executor (the row's checkpointing plan, if any), under `precision`, with or without a graph.
// Metered exactly from an empty count, so `input` itself is not counted.
struct ForwardBytes {
  int64_t end = 0;   ///< alive when the forward returns, its output included
  int64_t peak = 0;  ///< the most alive at once during it
};

ForwardBytes forward_bytes(nn::ChainImpl& chain, const at::Tensor& input, Precision precision,
                           bool graph) {
  memory::MemoryMeter meter(input.device());
  ForwardBytes out;
  {
    memory::MemoryMeter::Active on(meter);
    at::AutoGradMode grad_mode(graph);
    std::optional<memory::AutocastGuard> autocast;
    if (precision != Precision::kFP32) autocast.emplace(precision, input.device().type());
    // A forward without a graph runs as the engine's re-evaluations run it: its weights' casts
    // are not cached, each is freed after its layer (memory/precision.h).
    std::optional<memory::CastCacheOff> no_cache;
    if (!graph) no_cache.emplace();
    const at::Tensor output = chain.forward(input);
    out.end = meter.current();
  }
  out.peak = meter.peak();
  return out;
}

// The floor of a row (docs/memory-ablation.md, "The floor"): what is alive at every instant of a
// meta-iteration (the persistent part: parameters and buffers of every level, as in the peak,
// and the optimizer states they held after the warm-up), plus the largest set of further
// tensors that must coexist at one instant the meta-iteration passes through. Each instant
// below counts only tensors that the computation cannot have freed at that instant, measured
// (forwards) or counted from shapes (gradients):
//
// - the end of a forward through the varied level's chain with a graph: everything autograd
//   saved for the backward that follows, and the output, is alive (it is what that backward
//   reads). Run by the varied level's own step on its micro-batch and by each level above it
//   whose loss reads it (its batch through the chain, e.g. the reweighter's meta batch), at that
//   level's precision. From the second micro-step of an accumulation window on, the window's
//   running gradient sum (one tensor per trainable parameter) is alive as well (not under
//   ZeRO-2, where a rank keeps only its share of it).
// - the varied level's backward: autograd::grad returns one gradient per trainable parameter at
//   once (Problem::gradients), next to that running sum from the second micro-step on.
// - an upper level U above the varied level L (u2l U -> L, l2u L -> U) computes
//   v = dL_U/dw_L and its own direct gradient in one autograd::grad call; its direct gradient is
//   added to the hypergradient only after L's method has used v. Under a finite-difference
//   method (`MethodOptions::reevaluation().upper_gradients_only`: darts, sama), v is read again
//   for the second perturbation, after the first re-evaluation of L's loss on its micro-batch,
//   and the copies of L's weights the method declares (darts with exact_restore, the default,
//   and sama: one) are kept from before the first perturbation until the end. So during that first
//   re-evaluation's forward, U's gradients, v, the copy, and the forward's own peak coexist (a
//   forward without a graph, as the reweighting classifier runs it with frozen weight inputs, or
//   with one: the smaller of the two peaks).
//
// NOTE: nothing here is a model or a plan: a forward counted here is a forward the row runs,
// on a batch of the same shape, measured by the same exact meter as the peak. A sum of
// quantities that never coexist (gradients of the lower step next to the activations of the
// upper one) would not be a floor.
struct Floor {
  int64_t persistent = 0;
  int64_t transient = 0;
  std::string instant;

  void candidate(int64_t bytes, const std::string& what) {
    if (bytes > transient) {
      transient = bytes;
      instant = what;
    }
  }
};

}  // namespace

AblationRowResult measure_ablation_row(const std::string& config_path,
                                       const std::vector<std::string>& all_overrides,
                                       const std::string& problem_option, int64_t iterations) {
  AblationRowResult result;
  const std::vector<std::string> overrides =
      detail::measuring_overrides(config_path, all_overrides, true);
  reset_rss_peak();
  const int64_t rss_start = proc_status_bytes("VmRSS");
  {
    const RunConfig config = run::load_run_config(config_path, overrides);
    auto experiment = make_experiment(config);
    MemoryTarget& target = memory_target(*experiment, config.experiment, "mlo ablate");
    Engine& engine = experiment->engine();
    engine.initialize();
    for (const auto& p : engine.problems()) p->train();
    const std::string problem_name =
        problem_option.empty() ? target.main_problem() : problem_option;
    auto problem = experiment->problem(problem_name);
    const ProblemConfig& pc = problem->config();
    result.steps_per_iteration = pc.unroll_steps() * pc.gradient_accumulation();

    detail::warm_up(engine, result.steps_per_iteration);
    // The optimizer states exist from each level's first step on and stay (LibTorch's
    // optimizers update them in place): alive at every instant of the measured iterations.
    int64_t optimizer_state = 0;
    for (const auto& p : engine.problems()) optimizer_state += p->footprint().optimizer_state;
    int64_t meter_peak = 0;
    const c10::Device device = problem->device();
    // The measured window: `iterations` meta-iterations, and more until every level has taken an
    // optimizer step in it (a level that accumulates over several of its steps steps only every
    // few meta-iterations; its step belongs to the peak's candidates too).
    std::vector<int64_t> optimizer_steps;
    for (const auto& p : engine.problems()) optimizer_steps.push_back(p->optimizer_steps());
    const auto all_stepped = [&] {
      for (std::size_t k = 0; k < optimizer_steps.size(); ++k) {
        if (engine.problems()[k]->optimizer_steps() == optimizer_steps[k]) return false;
      }
      return true;
    };
    for (int64_t i = 0; i < iterations || (!all_stepped() && i < detail::kMaxWindow); ++i) {
      detail::synchronize(device);
      const auto start = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < result.steps_per_iteration; ++s) {
        engine.step();
        meter_peak = std::max(meter_peak, engine.last_step_peak_bytes());
      }
      detail::synchronize(device);
      result.iteration_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    result.rss_peak_bytes = proc_status_bytes("VmHWM");
    if (const auto* meter = engine.memory_meter())
      result.reserved_peak_bytes = meter->reserved_peak();
    // Per meta-iteration over the first `iterations` (a window extended for a slow level's step
    // holds more of the cheap meta-iterations in which that level does not step).
    double seconds = 0;
    for (int64_t i = 0; i < iterations; ++i) seconds += result.iteration_seconds[i];
    result.measured_seconds = seconds / static_cast<double>(iterations);
    result.seconds = result.measured_seconds;
    result.state_bytes = state_bytes(engine);
    result.peak_bytes = result.state_bytes + meter_peak;
    result.plan = detail::plan_line(engine, *problem);
    for (const auto& p : engine.problems()) {
      const memory::Footprint f = p->footprint();
      result.footprints.push_back(
          LevelFootprint{p->name(), f.parameters, bytes_of(p->parameters()), f.optimizer_state});
    }

    Floor floor;
    floor.persistent = result.state_bytes + optimizer_state;
    const Batch own = target.sample_batch(problem_name).to(problem->device());
    result.micro_batch = own.size();
    const int64_t weights = bytes_of(problem->parameters());
    // The running sum of an accumulation window (ZeRO-2/3: only this rank's share, not counted).
    const bool sharded_gradients = (engine.config().strategy() == dist::Strategy::kZero2 ||
                                    engine.config().strategy() == dist::Strategy::kZero3) &&
                                   pc.data_parallel();
    const int64_t window_sum = pc.gradient_accumulation() > 1 && !sharded_gradients ? weights : 0;
    floor.candidate(weights + window_sum,
                    problem_name + "'s gradients" + (window_sum > 0 ? " + window sum" : ""));
    // The experiment is discarded after this: the forwards' updates of batch-norm statistics
    // do not matter.
    auto* chain = dynamic_cast<nn::ChainImpl*>(&problem->module());
    const auto graph = resolved_dependencies(config);
    std::optional<ForwardBytes> reevaluation;
    if (chain != nullptr) {
      const auto own_graph = forward_bytes(*chain, own.data, pc.precision(), /*graph=*/true);
      floor.candidate(own_graph.end + window_sum,
                      problem_name + "'s forward end" + (window_sum > 0 ? " + window sum" : ""));
      reevaluation = own_graph;
      reevaluation->peak = std::min(
          own_graph.peak, forward_bytes(*chain, own.data, pc.precision(), /*graph=*/false).peak);
      for (const auto& upper : parents_of(graph, problem_name)) {
        const auto batch = detail::try_sample_batch(target, upper);
        if (!batch || batch->data.dim() != own.data.dim() ||
            batch->data.sizes().slice(1) != own.data.sizes().slice(1)) {
          continue;  // not input of this model
        }
        const Precision precision = experiment->problem(upper)->config().precision();
        floor.candidate(forward_bytes(*chain, batch->data.to(problem->device()), precision,
                                      /*graph=*/true)
                            .end,
                        problem_name + "'s forward end on " + upper + "'s batch");
      }
    }
    for (const auto& upper : parents_of(graph, problem_name)) {
      const auto lowers = graph.u2l.find(upper);
      if (lowers == graph.u2l.end() || std::find(lowers->second.begin(), lowers->second.end(),
                                                 problem_name) == lowers->second.end()) {
        continue;  // no path [upper, problem, upper]: upper computes no v for this problem
      }
      int64_t bytes = bytes_of(experiment->problem(upper)->parameters()) + weights;
      std::string what = upper + "'s gradients + v";
      const Reevaluation method = pc.method().reevaluation();
      if (method.upper_gradients_only) {
        if (method.weight_copies > 0) {
          bytes += method.weight_copies * weights;
          what += " + weight copy";
        }
        if (reevaluation) {
          bytes += reevaluation->peak;
          what += " + re-evaluation forward";
        }
      }
      floor.candidate(bytes, what);
    }
    result.persistent_bytes = floor.persistent;
    result.transient_bytes = floor.transient;
    result.floor_instant = floor.instant;
    result.floor_bytes = floor.persistent + floor.transient;
  }
  result.rss_growth_bytes = result.rss_peak_bytes - rss_start;
  // Not held while the next row runs, perhaps in processes of its own on the same GPU.
  release_cached_memory();
  return result;
}

}  // namespace run
}  // namespace mlo
