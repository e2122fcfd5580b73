#pragma once
/// \file
/// Resumable state of a run: the engine (counters, early stopping), every problem (module,
/// optimizer, schedule position, loss scaler, data-stream position, counters) and LibTorch's CPU
/// random generator. Files are written atomically (a temporary file, flushed and synced, then
/// renamed), and carry an end marker, so a half-written file is never taken for a good one.

#include <cstdint>
#include <string>

namespace mlo {

class Engine;

namespace io {

/// Saves the state of `engine` to `path` atomically.
void save_state(const std::string& path, const Engine& engine);

/// Restores `engine` from `path` and returns its global step. Throws `mlo::Error` naming the file
/// if it is missing, incomplete, damaged (every record's CRC-32 is checked) or from another
/// experiment.
int64_t load_state(const std::string& path, Engine& engine);

}  // namespace io
}  // namespace mlo
