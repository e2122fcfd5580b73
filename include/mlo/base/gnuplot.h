#pragma once
/// \file
/// Drawing a chart with gnuplot (base layer): runs a script that writes a PNG to a temporary
/// path, and moves the picture into place only when gnuplot succeeded, so that a failed run
/// never leaves a stale or half-written chart behind.

#include <string>

namespace mlo {

/// Runs `gnuplot script` (whose `set output` must be `drawn`) and renames `drawn` to `png`.
/// Returns "" on success, else why there is no PNG (gnuplot missing: the package to install;
/// gnuplot failing: its exit status and the script), with `drawn` removed.
std::string run_gnuplot(const std::string& script, const std::string& drawn,
                        const std::string& png);

}  // namespace mlo
