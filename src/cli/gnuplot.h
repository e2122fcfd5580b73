#pragma once
/// \file
/// Drawing a chart with gnuplot (base layer): runs a script that writes a PNG to a temporary
/// path, and moves the picture into place only when gnuplot succeeded, so that a failed run
/// never leaves a half-written chart behind.

#include <string>

namespace mlo {

/// Runs ``gnuplot -e "outfile = '<drawn>'" script`` and renames `drawn` to `png`. The script
/// must `set output outfile`, and may default it to `png` for a user who runs it by hand:
/// ``if (!exists("outfile")) outfile = '<png>'``. Returns "" on success, else why there is no
/// new PNG (gnuplot missing: the package to install; gnuplot failing: its exit status and the
/// script or an empty picture; the rename failing), with `drawn` removed; an older PNG at `png`
/// is not touched. `drawn` may exist beforehand, empty (a name the caller took, e.g. mkstemp).
std::string run_gnuplot(const std::string& script, const std::string& drawn,
                        const std::string& png);

}  // namespace mlo
