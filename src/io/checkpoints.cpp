#include "checkpoints.h"

#include <mlo/base/error.h>
#include <mlo/core/engine.h>
#include <mlo/dist/process_group.h>
#include <mlo/io/state.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

namespace mlo {
namespace io {

namespace fs = std::filesystem;

Checkpoints::Checkpoints(std::string out_dir, dist::Strategy strategy, int rank,
                         int64_t save_step)
    : out_dir_(std::move(out_dir)), strategy_(strategy), rank_(rank), save_step_(save_step) {}

StepDecision Checkpoints::on_step_end(Engine& engine, const StepEnd& step) {
  if (save_step_ > 0 && step.step % save_step_ == 0) save_due_ = true;
  if (save_due_ && step.resumable) {
    save(engine);
    save_due_ = false;
  }
  return StepDecision::kContinue;
}

void Checkpoints::on_end(Engine& engine, const StepEnd& last) {
  // NOTE: saved again even when a periodic save just took this step: under a distributed
  // strategy the ranks learn rank 0's early-stopping decision after the step's callbacks.
  if (last.resumable) {
    save(engine);
    return;
  }
  if (rank_ != 0) return;
  // (an early stop, or train_iters, inside a window: the previous state stays)
  const bool kept = fs::exists(path());
  spdlog::warn("the run ended at global step {}, inside an accumulation window; its state "
               "cannot be resumed exactly and is not saved ({})",
               last.step,
               kept ? path() + " keeps the previous one"
                    : "no earlier state was saved, so --resume is not possible");
}

bool Checkpoints::sharded() const {
  return dist::shards_optimizer_state(strategy_);
}

bool Checkpoints::saves() const { return rank_ == 0 || sharded(); }

std::string Checkpoints::path() const {
  const std::string name =
      sharded() ? "state.rank" + std::to_string(rank_) + ".pt" : std::string("state.pt");
  return (fs::path(out_dir_) / name).string();
}

std::string Checkpoints::previous_path() const {
  return (fs::path(out_dir_) / ("state.rank" + std::to_string(rank_) + ".prev.pt")).string();
}

void Checkpoints::save(const Engine& engine) const {
  if (!saves()) return;
  // NOTE: under zero the ranks write one after another, not together: a crash in between leaves
  // some ranks a save ahead. The previous file lets `load` go back to a step all ranks have.
  if (sharded() && fs::exists(path())) fs::rename(path(), previous_path());
  io::save_state(path(), engine);
}

int64_t Checkpoints::load(Engine& engine, std::string* loaded) const {
  if (loaded != nullptr) *loaded = path();
  if (!sharded()) return io::load_state(path(), engine);
  const bool current = fs::exists(path());
  MLO_CHECK(current || fs::exists(previous_path()), "rank ", rank_, ": no saved state at '", path(),
            "' (under engine.strategy ", dist::to_string(strategy_),
            " each rank resumes from its own file, so a run resumes on the number of ranks that "
            "saved it); run without --resume to start fresh");
  if (loaded != nullptr) *loaded = current ? path() : previous_path();
  int64_t step = io::load_state(current ? path() : previous_path(), engine);
  dist::ProcessGroup* group = engine.group();
  if (group == nullptr || group->size() == 1) return step;

  // Every rank's step, gathered through one sum (each rank fills its own slot), on the
  // model's device (NCCL reduces device tensors only).
  const auto gather = [&](int64_t value) {
    at::Tensor slots = torch::zeros({group->size()}, torch::kDouble);
    slots[group->rank()] = static_cast<double>(value);
    const c10::Device device = engine.problems().front()->device();
    if (!device.is_cpu()) slots = slots.to(device);
    group->all_reduce_sum({slots});
    return slots.cpu();
  };
  const at::Tensor steps = gather(step);
  const auto common = static_cast<int64_t>(steps.min().item<double>());
  if (step != common) {
    MLO_CHECK(current && fs::exists(previous_path()), "rank ", rank_, ": its state '", path(),
              "' is at step ", step, " but another rank's is at step ", common,
              ", and no earlier state of this rank is kept; the states cannot be matched");
    step = io::load_state(previous_path(), engine);
    if (loaded != nullptr) *loaded = previous_path();
    MLO_CHECK(step == common, "rank ", rank_,
              ": the ranks' states are at different steps (this "
              "rank's files: ",
              step, " and later; the earliest rank's: ", common, "); they cannot be matched");
    spdlog::warn(
        "rank {}: its latest state was a save ahead of another rank's (interrupted "
        "while saving?); resuming all ranks from step {}",
        rank_, common);
  }
  // The others' fallbacks must have worked too: agree once more.
  const at::Tensor check = gather(step);
  MLO_CHECK(check.min().item<double>() == check.max().item<double>(), "the ranks' states are at ",
            "different steps and cannot be matched");
  return step;
}

}  // namespace io
}  // namespace mlo
