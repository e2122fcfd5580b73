#include "checkpoints.h"

#include "metrics_files.h"
#include "run_record.h"

#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>
#include <mlo/core/engine.h>
#include <mlo/dist/process_group.h>
#include <mlo/io/state.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace mlo {
namespace io {

namespace fs = std::filesystem;

namespace {

// `slots` summed over the engine's ranks (each rank fills its own), reduced on the model's
// device (NCCL reduces device tensors only); back on the CPU.
at::Tensor summed_over_ranks(Engine& engine, at::Tensor slots) {
  const c10::Device device = engine.problems().front()->device();
  if (!device.is_cpu()) slots = slots.to(device);
  engine.group()->all_reduce_sum({slots});
  return slots.cpu();
}

// `value` of every rank of the engine's group, by rank (gathered through one sum: each rank
// fills its own slot).
at::Tensor gathered(Engine& engine, int64_t value) {
  dist::ProcessGroup* group = engine.group();
  at::Tensor slots = torch::zeros({group->size()}, torch::kDouble);
  slots[group->rank()] = static_cast<double>(value);
  return summed_over_ranks(engine, slots);
}

}  // namespace

Checkpoints::Checkpoints(std::string out_dir, dist::Strategy strategy, int rank,
                         int64_t save_step, StateIdentity identity)
    : out_dir_(std::move(out_dir)),
      strategy_(strategy),
      rank_(rank),
      save_step_(save_step),
      identity_(std::move(identity)) {}

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
  StateIdentity identity = identity_;
  if (rank_ == 0) {
    // NOTE: the metrics records up to this step reach the disk before the state does, so that
    // a state that survives a power loss never looks ahead of its own folder's metrics (load).
    for (const char* name : {"metrics.jsonl", "metrics.csv"}) {
      const int fd = ::open((fs::path(out_dir_) / name).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ::fsync(fd);
      ::close(fd);
    }
    identity.last_record = last_metrics_step(out_dir_).value_or(-1);
  }
  io::save_state(path(), engine, identity);
}

int64_t Checkpoints::load(Engine& engine, std::string* loaded) {
  if (loaded != nullptr) *loaded = path();
  StateIdentity saved;
  // A rank that cannot read its state still joins the others, so that all refuse together,
  // naming it, instead of the others waiting for it until engine.timeout_s.
  std::string failure;
  int64_t step = -1;
  try {
    step = load_own(engine, loaded, &saved);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {  // (a file system's or LibTorch's error too)
    failure = e.what();
  }
  if (!failure.empty() && strategy_ != dist::Strategy::kDefault) engine.initialize();
  dist::ProcessGroup* group = engine.group();
  const bool together = group != nullptr && group->size() > 1;
  MLO_CHECK(failure.empty() || together, failure);
  if (together) {
    const at::Tensor gathered_steps = gathered(engine, failure.empty() ? step : -1);
    std::vector<int64_t> steps;
    std::string unread;
    for (int64_t r = 0; r < gathered_steps.size(0); ++r) {
      steps.push_back(static_cast<int64_t>(gathered_steps[r].item<double>()));
      if (steps.back() < 0) unread += (unread.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!unread.empty()) {
      throw Error((failure.empty() ? std::string() : failure + "; so ") +
                  "no rank resumes: rank(s) " + unread + " could not read their saved state in '" +
                  out_dir_ + "' (each one's log says why); does every node see the same folder?");
    }
    if (sharded()) step = agree_on_step(engine, loaded, &saved, step, steps);
  }
  // The state says how far its run's metrics reached when it saved.
  std::string refusal;
  const std::optional<int64_t> last = rank_ == 0 ? last_metrics_step(out_dir_) : std::nullopt;
  if (last && saved.last_record > *last) {
    refusal = "the state file '" + (loaded != nullptr ? *loaded : path()) + "' (global step " +
              std::to_string(step) + ") was saved when its run's metrics reached step " +
              std::to_string(saved.last_record) + ", but the metrics in '" + out_dir_ +
              "' end at step " + std::to_string(*last) +
              ": it is not the state of the run whose records are there (copied from another "
              "folder?); start a new run there with --overwrite, or in another folder";
  }
  // ... and with which configuration: this run's, or one the folder records (a resume may
  // change it: the folder then keeps each one it went on with).
  if (refusal.empty() && rank_ == 0 && !saved.config.empty() && !identity_.config.empty()) {
    const std::string changes = arithmetic_changes(saved.config, identity_.config);
    const auto records = recorded_configs(out_dir_);
    const bool recorded = std::any_of(records.begin(), records.end(), [&](const std::string& r) {
      return arithmetic_changes(saved.config, r).empty();
    });
    if (!changes.empty() && !recorded) {
      refusal = "the state file '" + (loaded != nullptr ? *loaded : path()) +
                "' was saved by a run of another configuration than this one and than any "
                "recorded in '" + out_dir_ + "' (it differs from this one in " + changes +
                "): it is not the state of the run there (copied from another folder?); start "
                "a new run there with --overwrite, or in another folder";
    }
  }
  // Every rank goes on from one step, or all refuse: each rank reads the state it sees (a stale
  // copy would set the ranks apart), and rank 0's verdict is every rank's (the others would
  // wait for it in training's collectives).
  if (together) {
    const int64_t n = group->size();
    at::Tensor slots = torch::zeros({2 * n}, torch::kDouble);  // steps, then refusals
    slots[group->rank()] = static_cast<double>(step);
    slots[n + group->rank()] = refusal.empty() ? 0.0 : 1.0;
    slots = summed_over_ranks(engine, slots);
    if (refusal.empty() && slots.slice(0, n).sum().item<double>() > 0) {
      refusal = "rank 0 refused the saved state in '" + out_dir_ + "' (its log says why)";
    }
    std::string steps;
    for (int64_t r = 0; r < n; ++r) {
      steps += (r ? ", rank " : "rank ") + std::to_string(r) + " at step " +
               std::to_string(static_cast<int64_t>(slots[r].item<double>()));
    }
    if (refusal.empty() && slots.slice(0, 0, n).min().item<double>() !=
                               slots.slice(0, 0, n).max().item<double>()) {
      refusal = "the ranks' saved states are at different global steps (" + steps +
                "): does every node see the same folder '" + out_dir_ +
                "'? Resume where every rank reads the same state";
    }
  }
  MLO_CHECK(refusal.empty(), refusal);
  return step;
}

int64_t Checkpoints::load_own(Engine& engine, std::string* loaded, StateIdentity* saved) const {
  if (!sharded()) return io::load_state(path(), engine, identity_, saved);
  const bool current = fs::exists(path());
  MLO_CHECK(current || fs::exists(previous_path()), "rank ", rank_, ": no saved state at '", path(),
            "' (under engine.strategy ", dist::to_string(strategy_),
            " each rank resumes from its own file, so a run resumes on the number of ranks that "
            "saved it); run without --resume to start fresh");
  if (loaded != nullptr) *loaded = current ? path() : previous_path();
  return io::load_state(current ? path() : previous_path(), engine, identity_, saved);
}

int64_t Checkpoints::agree_on_step(Engine& engine, std::string* loaded, StateIdentity* saved,
                                   int64_t step, const std::vector<int64_t>& steps) const {
  const int64_t common = *std::min_element(steps.begin(), steps.end());
  // A rank that cannot go back to the common step says so in the next gather (-1), so that
  // every rank refuses together.
  bool matched = true;
  if (step != common) {
    // (a rank whose latest file is missing has read its previous one already)
    std::error_code error;
    if (fs::exists(path(), error) && fs::exists(previous_path(), error)) {
      try {
        step = io::load_state(previous_path(), engine, identity_, saved);
        if (loaded != nullptr) *loaded = previous_path();
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        spdlog::error("rank {}: {}", rank_, e.what());
        step = -1;
      }
    } else {
      step = -1;
    }
    matched = step == common;
    if (matched) {
      spdlog::warn(
          "rank {}: its latest state was a save ahead of another rank's (interrupted "
          "while saving?); resuming all ranks from step {}",
          rank_, common);
    }
  }
  const at::Tensor check = gathered(engine, matched ? step : -1);
  if (check.min().item<double>() != check.max().item<double>()) {
    std::string ranks;
    for (int64_t r = 0; r < check.size(0); ++r) {
      const auto at = static_cast<int64_t>(check[r].item<double>());
      ranks += (r ? ", " : "") + std::string("rank ") + std::to_string(r) +
               (at < 0 ? std::string(" has no state at step ") + std::to_string(common)
                       : " at step " + std::to_string(at));
    }
    throw Error("the ranks' saved states in '" + out_dir_ + "' cannot be matched to one step (" +
                ranks + "; each rank keeps its latest state and the one before): does every "
                "node see the same folder? Start a new run there with --overwrite, or in "
                "another folder");
  }
  return step;
}

}  // namespace io
}  // namespace mlo
