#pragma once
// Part of the mlo tool (src/cli): `mlo plot RUN [RUN...] [--metric NAME]... [--out FILE.png]
// [--band minmax|std]`: learning curves of one or several runs as a PNG drawn by gnuplot, one
// panel per metric, runs overlaid with a legend; a `--seeds` folder is drawn as its mean with a
// band. `mlo compare --plot FILE.png` draws its two runs the same way.
#include "curves.h"

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mlo {
namespace cli {

struct PlotOptions {
  std::vector<std::string> metrics;  ///< tags; empty: default_metrics of the first run
  std::string out;                   ///< the PNG; "" = <first run>/curves.png
  std::string out_option = "--out";  ///< the flag that gave `out`, for errors ("--plot")
  Band band = Band::kMinMax;
};

/// Draws `runs` (folders) into `options.out`, with the gnuplot script (.gp) and the data (.dat)
/// beside it so that `gnuplot FILE.gp` redraws it. Returns the PNG's path. Throws `mlo::Error`
/// for a folder that is not a run, a metric that no run logged (listing the ones there are),
/// or gnuplot failing; and, before writing anything, for an `out` that does not end in .png,
/// one that exists and is not a PNG (by its signature bytes), and a .gp or .dat beside it that
/// exists and was not written by mlo plot: only mlo plot's own files are ever replaced.
std::string plot_runs(const std::vector<std::string>& runs, const PlotOptions& options);

/// Registers `plot` on `app`; after parsing, `run()` draws if it was given.
class PlotCommand {
 public:
  explicit PlotCommand(CLI::App& app);
  /// Whether the command line chose `plot`.
  bool parsed() const;
  /// Draws the picture and prints where it is; returns the exit status.
  int run() const;

 private:
  CLI::App* command_;
  std::vector<std::string> runs_;
  PlotOptions options_;
  std::string band_ = "minmax";
};

}  // namespace cli
}  // namespace mlo
