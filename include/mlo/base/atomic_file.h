#pragma once
/// \file
/// Writing a file so that a crash never leaves a half-written one in its place (base layer).

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace mlo {

/// Writes `path` atomically: `write` fills a temporary file beside it (`path + ".tmp"`), which
/// is flushed to disk (fsync) and then renamed over `path`; the folder is synced too, so the
/// rename itself survives a power loss. Readers see the old file or the new one, never a mix.
/// Throws `mlo::Error` naming the file and the cause (e.g. "No space left on device") when it
/// cannot be written, flushed or moved; the file at `path` is then left as it was, and the
/// temporary file is removed.
///
/// ```
/// mlo::write_file_atomically("runs/x/results.json", [&](std::ostream& out) { out << json; });
/// ```
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

/// `write_file_atomically` for a file whose bytes another library writes to a path: `write`
/// receives the temporary file's path; an exception it throws becomes the `mlo::Error`.
void write_path_atomically(const std::string& path,
                           const std::function<void(const std::string& temporary)>& write);

/// A path that does not exist yet, for something kept aside: `prefix` followed by the current
/// UTC time ("runs/x/replaced-20261128-031500"), with "-2", "-3", ... added when taken.
std::string unused_timestamped(const std::string& prefix);

/// Moves the entries `names` (files or folders) of folder `dir` into a new folder
/// `dir/replaced-<UTC time>/` (`unused_timestamped`) and returns its path: how a tool replaces
/// earlier outputs without deleting them. Throws `mlo::Error` naming what cannot be moved.
std::string move_into_replaced(const std::string& dir, const std::vector<std::string>& names);

}  // namespace mlo
