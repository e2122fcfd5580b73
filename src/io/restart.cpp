#include "restart.h"

#include "run_folder.h"

#include <filesystem>

namespace mlo {
namespace io {
namespace {

namespace fs = std::filesystem;

// What a worker that its launcher restarted after a failure does with the run folder: continue
// from the saved state, start over (moving the failed attempt's files aside), or as asked.
enum class Restart { kAsAsked, kResume, kStartOver };

Restart restart_action(const dist::Rendezvous& where, const RunOptions& options) {
  if (where.restart_count == 0 || options.resume()) return Restart::kAsAsked;
  const fs::path out(options.dir());
  const bool saved = fs::exists(out / "state.pt") || fs::exists(out / "state.rank0.pt") ||
                     fs::exists(out / "state.rank0.prev.pt");
  if (where.rank != 0) return saved ? Restart::kResume : Restart::kAsAsked;
  if (!io::RunFolder::claimed_by_this_launcher(options.dir())) return Restart::kAsAsked;
  return saved ? Restart::kResume : Restart::kStartOver;
}

}  // namespace

RunOptions restarted(const dist::Rendezvous& where, RunOptions options) {
  switch (restart_action(where, options)) {
    case Restart::kResume:
      return options.resume(true).overwrite(false);
    case Restart::kStartOver:
      return options.overwrite(true);
    case Restart::kAsAsked:
      break;
  }
  return options;
}

}  // namespace io
}  // namespace mlo
