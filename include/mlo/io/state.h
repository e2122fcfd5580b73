#pragma once
/// \file
/// Resumable state of a run: the engine (counters, early stopping), every problem (module,
/// optimizer, schedule position, loss scaler, data-stream position, counters) and LibTorch's CPU
/// random generator. Files are written atomically (a temporary file, flushed and synced, then
/// renamed), and carry an end marker, so a half-written file is never taken for a good one.

#include <cstdint>
#include <optional>
#include <string>

namespace mlo {

class Engine;

namespace io {

/// What a state says of the run that saved it, so that a resume can tell another run's state
/// (a file copied between folders) from its own.
struct StateIdentity {
  std::string run;              ///< the run's name (its experiment's, or its program's); "": unsaid
  std::optional<int64_t> seed;  ///< the run's seed, when it says
  /// The global step of the last metrics record in the run's folder when it saved (-1: unsaid).
  int64_t last_record = -1;
  /// The configuration the run went on with when it saved, as its folder records it (YAML);
  /// "": unsaid. `load_state` does not compare it (a resume may change the configuration).
  std::string config;
};

/// Saves the state of `engine` to `path` atomically, with `identity`.
void save_state(const std::string& path, const Engine& engine,
                const StateIdentity& identity = {});

/// Restores `engine` from `path` and returns its global step. Throws `mlo::Error` naming the file
/// if it is missing, incomplete, damaged (every record's CRC-32 is checked) or from another
/// experiment, and, before anything is restored, where the state names another run or seed than
/// `expected` (what either leaves unsaid is not compared). `saved` (optional) receives the
/// state's identity (empty for a state saved without one).
int64_t load_state(const std::string& path, Engine& engine, const StateIdentity& expected = {},
                   StateIdentity* saved = nullptr);

}  // namespace io
}  // namespace mlo
