#pragma once
// Part of src/io (internal): a run's claim on its folder. A folder holds a run when it has what
// a run leaves of value: a saved state, recorded metrics or results. The claim decides, before
// anything is written, whether this run may use the folder:
//   resume     the folder must hold a run's files (its state is checked later, by Checkpoints);
//   overwrite  a run there is moved into DIR/replaced-<UTC time>/ first (nothing is deleted);
//   neither    the folder must hold no run; the files of one that ended before it saved or
//              recorded anything (its lock, log, configuration) are moved aside the same way,
//              and a config.yaml with no run files beside it (the user's) is never written over.
// It holds an exclusive lock (flock on DIR/.mlo.lock, released when the process ends, however
// it ends) for as long as it lives; the lock file names the process, host and start time, so a
// second writer fails at once naming the first, and the process that started it (a launcher).

#include <string>
#include <vector>

namespace mlo {
namespace io {

class RunFolder {
 public:
  /// Claims `dir` (created when missing) as described above; throws `mlo::Error` naming the
  /// folder, what is in the way and what to do.
  RunFolder(std::string dir, bool resume, bool overwrite);
  /// The constructor's refusals (what is in the way, a live lock) without claiming or writing
  /// anything: the same errors, for a caller that prepares for long before it claims.
  static void check(const std::string& dir, bool resume, bool overwrite);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  /// The files and folders of a run found in `dir` (names relative to it), sorted.
  static std::vector<std::string> run_files(const std::string& dir);
  /// Those of `run_files` that hold something of value: states, metrics with rows, results.
  static std::vector<std::string> results(const std::string& dir);
  /// Whether the lock file of `dir` was written by a run that the same launcher process as
  /// this one started (the same parent process, on this host): a launcher's restart of its
  /// workers finds the folder its first attempt claimed, not a run of someone else's.
  static bool claimed_by_this_launcher(const std::string& dir);
  /// Where the previous run's files went, or "" (none were moved).
  const std::string& replaced() const { return replaced_; }

 private:
  // This process's parent ("host pid start-ticks"), as the lock file records it.
  static std::string launcher_identity();

  std::string dir_;
  int lock_fd_ = -1;
  std::string replaced_;
};

/// The lock file of a run folder.
inline constexpr const char* kLockFile = ".mlo.lock";
/// The lock file's line naming the process that started the run's process.
inline constexpr const char* kLauncherLine = "launched by: ";

}  // namespace io
}  // namespace mlo
