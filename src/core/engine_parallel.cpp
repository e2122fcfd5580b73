// The engine's side of data parallelism (docs/distributed.md): joining the process group, the
// setups a method cannot serve exactly, the per-step agreement on stopping, and which saved
// states a run can resume. The per-level averaging is src/dist/gradient_sync.{h,cpp}.
#include <mlo/core/engine.h>

#include "engine_nodes.h"
#include "level_runtime.h"

#include <mlo/dist/process_group.h>

#include <spdlog/spdlog.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace mlo {

Engine& Engine::process_group(std::shared_ptr<dist::ProcessGroup> group) {
  MLO_CHECK(!initialized_, "engine: process_group(...) after initialization");
  MLO_CHECK(group != nullptr, "engine: process_group(...) got a null group");
  group_ = std::move(group);
  return *this;
}

int Engine::rank() const { return group_ ? group_->rank() : 0; }

int Engine::world_size() const { return group_ ? group_->size() : 1; }

bool Engine::validating_rank() const {
  return is_main() || std::any_of(problems_.begin(), problems_.end(),
                                  [](const ProblemPtr& p) {
                                    const detail::LevelRuntime* level = detail::runtime_of(*p);
                                    return level != nullptr && level->shards_parameters();
                                  });
}

// NOTE: the group joins at initialization (not construction), so that a config error is
// reported before a rank waits for its peers.
void Engine::connect() {
  using dist::Strategy;
  if (config_.strategy() == Strategy::kDefault) {
    MLO_CHECK(!group_, "engine: a process group was given but the strategy is default; set ",
              "strategy to distributed, zero1, zero2 or zero3");
    return;
  }
  MLO_CHECK(config_.timeout_s() > 0 && config_.timeout_s() <= kMaxTimeoutSeconds,
            "engine: timeout_s must be in (0, ", kMaxTimeoutSeconds, "], got ",
            config_.timeout_s());
  if (!group_) {
    dist::GroupOptions options;
    options.backend = config_.backend();
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_s() * 1000));
    group_ = dist::ProcessGroup::connect(dist::Rendezvous::from_env(), options);
  }
}

bool Engine::agree_to_go_on(bool finish, bool pause) {
  if (finish && !stopped_early_) {
    spdlog::info("mlo: a callback ended training at global step {}", global_step_);
  }
  if (!group_) {
    stopped_early_ = stopped_early_ || finish;
    return !stopped_early_ && !pause;
  }
  // One collective per global step: [ranks that finish (rank 0's early stopping, a callback's
  // kFinish), ranks whose callbacks asked to pause].
  at::Tensor flags = at::empty({2}, at::kDouble);
  double* f = flags.data_ptr<double>();
  f[0] = (is_main() && stopped_early_) || finish ? 1.0 : 0.0;
  f[1] = pause ? 1.0 : 0.0;
  // (on the model's device: NCCL reduces device tensors only; zero3's offloaded shards are not)
  const c10::Device device = problems_.front()->device();
  if (!device.is_cpu()) flags = flags.to(device);
  group_->all_reduce_sum({flags});
  flags = flags.cpu();
  stopped_early_ = flags.data_ptr<double>()[0] > 0;
  return !stopped_early_ && flags.data_ptr<double>()[1] == 0;
}

// NOTE: a state saved under zero1/zero2/zero3 holds one rank's shard of the optimizer state (and
// under zero3 of the parameters; each rank
// saves its own), which only the same rank of the same split can take back. A complete state
// (one process, or distributed: rank 0's optimizer state is every rank's) resumes under one
// process or distributed at any world size, since batch positions count global batches.
bool Engine::partial_window() const {
  if (world_size() <= 1) return false;
  return std::any_of(problems_.begin(), problems_.end(), [](const ProblemPtr& p) {
    const detail::LevelRuntime* level = detail::runtime_of(*p);
    return level != nullptr && level->group() != nullptr &&
           p->step_count() % p->config().gradient_accumulation() != 0;
  });
}

bool Engine::resumable_now() const {
  // (zero1/zero2/zero3: every rank saves its own window and shard, resumed on the same split)
  return config_.strategy() != dist::Strategy::kDistributed || !partial_window();
}

void Engine::check_resumable(torch::serialize::InputArchive& archive) const {
  c10::IValue value;
  const bool tagged = archive.try_read("strategy", value);
  const std::string saved = tagged ? value.toStringRef() : "default";
  int64_t saved_world = 1;
  if (archive.try_read("world_size", value)) saved_world = value.toInt();
  const auto sharded = [](const std::string& s) {
    return s == "zero1" || s == "zero2" || s == "zero3";
  };
  const std::string now = dist::to_string(config_.strategy());
  if (sharded(saved)) {
    MLO_CHECK(saved == now && saved_world == world_size(), "engine state: saved by strategy ",
              saved, " on ", saved_world, " rank(s), whose optimizer state is sharded per ",
              "rank; it resumes only with strategy ", saved, " on ", saved_world,
              " ranks (this run: ", now, " on ", world_size(), ")");
  } else {
    MLO_CHECK(!sharded(now), "engine state: saved by strategy ", saved, " (complete optimizer ",
              "state); resume it with strategy default or distributed, then switch to ", now,
              " in a new run");
    // NOTE: under distributed only rank 0 saves; inside an accumulation window its partial
    // gradients and micro-batches are its shard's, and a resume would use them on every rank.
    bool partial = false;
    if (archive.try_read("partial_window", value)) partial = value.toBool();
    MLO_CHECK(!partial, "engine state: saved by rank 0 of a ", saved, " run of ", saved_world,
              " ranks inside an accumulation window (its partial gradients and micro-batches ",
              "are rank 0's shard only), so it cannot be resumed exactly; resume from a state ",
              "saved at an accumulation boundary (a save_step or --stop-at that is a multiple ",
              "of every data-parallel level's gradient_accumulation x unroll_steps)");
  }
}

}  // namespace mlo
