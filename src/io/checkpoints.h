#pragma once
// Part of src/io (internal): a run's resumable state, a callback of mlo::Run: where and by whom
// it is saved and loaded under each engine strategy, and when. It saves every `save_step`
// global steps and when the engine's loop ends, but never a state that cannot be resumed
// exactly (StepEnd::resumable): a periodic save inside a distributed run's accumulation window
// waits for the window's end, and a run that ends inside one keeps its previous state and says
// so.
//
//   default, distributed: one file, <out>/state.pt, written by rank 0 only (the ranks hold the
//     same parameters and optimizer state); on --resume every rank loads it (a run may resume on
//     another number of ranks: the data streams save world-size independent positions).
//   zero1, zero2, zero3: each rank holds its shard of the optimizer state (zero3: and of the
//     parameters), so every rank writes its own <out>/state.rank<r>.pt, keeping the previous one as state.rank<r>.prev.pt; on --resume
//     each rank loads its own, and the ranks agree on a step every rank has (a crash between
//     two ranks' saves leaves some a save ahead: those fall back to their previous file).

#include <mlo/core/callback.h>
#include <mlo/dist/strategy.h>
#include <mlo/io/state.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlo {

class Engine;

namespace io {

class Checkpoints : public Callback {
 public:
  /// The state of a run in `out_dir`, for rank `rank` of a launch under `strategy`, saved
  /// every `save_step` global steps (0: at the end only), with `identity` (its `last_record`:
  /// rank 0 reads the folder's metrics at each save).
  Checkpoints(std::string out_dir, dist::Strategy strategy, int rank, int64_t save_step = 0,
              StateIdentity identity = {});

  StepDecision on_step_end(Engine& engine, const StepEnd& step) override;
  void on_end(Engine& engine, const StepEnd& last) override;

  /// Whether this rank writes state: rank 0, or every rank under zero1/zero2/zero3.
  bool saves() const;
  /// This rank's state file (what it saves and loads).
  std::string path() const;
  /// Saves `engine` to `path()` atomically when `saves()` (else nothing).
  void save(const Engine& engine) const;
  /// Loads this rank's state into `engine` (initializing it, which joins the process group);
  /// under zero1/zero2/zero3 the ranks then agree on a common step (falling back to a previous
  /// file), and under every strategy with several ranks all refuse a state unless every rank's
  /// is at that step. Returns the global step. Throws
  /// `mlo::Error` naming the file when it is missing or does not fit, when it names another
  /// run or seed than this one's identity, and (rank 0) when it is ahead of the folder's
  /// metrics: its run had written records to a later step than the folder's last, so it is not
  /// the state of the run that wrote them, or when its configuration differs from this run's
  /// and from every one the folder records in a key that changes the arithmetic
  /// (`arithmetic_changes`). `loaded` (optional) receives the file it was
  /// finally read from.
  int64_t load(Engine& engine, std::string* loaded = nullptr);

 private:
  bool sharded() const;
  // The state of this rank (under zero1/2/3 its latest file, else its previous one).
  int64_t load_own(Engine& engine, std::string* loaded, StateIdentity* saved) const;
  // Under zero1/2/3: the step every rank has (`steps`, by rank; this rank's is `step`), this
  // rank falling back to its previous file when it is a save ahead; all refuse together when
  // no such step exists.
  int64_t agree_on_step(Engine& engine, std::string* loaded, StateIdentity* saved, int64_t step,
                        const std::vector<int64_t>& steps) const;
  std::string previous_path() const;

  std::string out_dir_;
  dist::Strategy strategy_;
  int rank_;
  int64_t save_step_;
  StateIdentity identity_;
  bool save_due_ = false;  // a periodic save that waits for an accumulation window's end
};

}  // namespace io
}  // namespace mlo
