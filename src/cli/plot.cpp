#include "plot.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include "gnuplot.h"
#include <mlo/base/number_text.h>

#include <CLI/CLI.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

namespace mlo {
namespace cli {
namespace {

namespace fs = std::filesystem;

// A gnuplot single-quoted string: a quote inside is doubled.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// The shortest text that reads back as `value` (gnuplot reads NaN as "NaN" and skips it).
std::string number(double value) {
  if (!std::isfinite(value)) return "NaN";
  return number_text(value);
}

// The bytes every PNG begins with.
const std::string kPngSignature("\x89PNG\r\n\x1a\n", 8);
// How the files that mlo plot writes beside the picture begin (the script, the data).
const std::string kScriptMark = "# gnuplot script written by mlo plot";
const std::string kDataMark = "# block 0: ";

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string legend(const RunCurves& run, const Curve& curve, Band band) {
  if (run.seeds.size() == 1) return run.label;
  return run.label + ": mean of " + std::to_string(curve.seeds) + " seeds, band " +
         (band == Band::kStd ? "+-1 std" : "min-max");
}

// The first `size` bytes of `path` ("" when it cannot be read).
std::string first_bytes(const fs::path& path, size_t size) {
  std::ifstream in(path, std::ios::binary);
  std::string out(size, '\0');
  in.read(&out[0], static_cast<std::streamsize>(size));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

// Whether something (a file, a folder, a link, even a dangling one) is at `path`.
bool taken(const fs::path& path) {
  std::error_code ignored;
  return fs::symlink_status(path, ignored).type() != fs::file_type::not_found;
}

// Whether `path` is a regular file (or a link to one) that begins with `signature`.
bool begins_with(const fs::path& path, const std::string& signature) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored) && first_bytes(path, signature.size()) == signature;
}

// The files mlo plot writes, checked before anything is written: the picture must be a PNG,
// and none of them may replace a file that mlo plot did not write (a user's results, notes).
void check_outputs(const fs::path& png, const std::string& flag, const std::string& given,
                   const std::string& gp, const std::string& dat) {
  const std::string out =
      given.empty() ? "the default " + flag + " '" + png.string() + "'" : flag + " '" + given + "'";
  std::string extension = png.extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  MLO_CHECK(extension == ".png", "mlo plot: ", out,
            " does not end in .png: the picture is a PNG (gnuplot's pngcairo terminal); give a "
            "file name that ends in .png, e.g. '",
            (png.parent_path() / "curves.png").string(), "'");
  // NOTE: a chart that mlo plot drew (a PNG with mlo plot's script beside it) may be drawn
  // again; any other file at that path, a picture of the user's own too, is not replaced.
  MLO_CHECK(!taken(png) || begins_with(png, kPngSignature), "mlo plot: ", out,
            " exists and is not a PNG (it lacks PNG's signature bytes); it is not replaced: give "
            "another file name, or move that file away");
  MLO_CHECK(!taken(png) || begins_with(gp, kScriptMark), "mlo plot: ", out,
            " exists and was not drawn by mlo plot (no script of mlo plot's beside it, '", gp,
            "'); it is not replaced: give another file name, or move that file away");
  // The script and data beside the picture: only files that mlo plot wrote are replaced.
  MLO_CHECK(!taken(gp) || begins_with(gp, kScriptMark), "mlo plot: '", gp,
            "', the gnuplot script written beside ", out,
            ", exists and was not written by mlo plot (its first line is not '", kScriptMark,
            " ...'); it is not replaced: give ", flag, " another name, or move that file away");
  MLO_CHECK(!taken(dat) || begins_with(dat, kDataMark), "mlo plot: '", dat,
            "', the data written beside ", out,
            ", exists and was not written by mlo plot (it does not begin with '", kDataMark,
            "'); it is not replaced: give ", flag, " another name, or move that file away");
}

bool drawable(const Curve& curve) {
  return std::any_of(curve.mean.begin(), curve.mean.end(),
                     [](double v) { return std::isfinite(v); });
}

}  // namespace

std::string plot_runs(const std::vector<std::string>& folders, const PlotOptions& options) {
  MLO_CHECK(!folders.empty(), "mlo plot: no run folder given");
  const fs::path png = fs::absolute(options.out.empty() ? fs::path(folders.front()) / "curves.png"
                                                        : fs::path(options.out));
  MLO_CHECK(!fs::is_directory(png) && png.has_filename(), "mlo plot: ", options.out_option, " '",
            options.out, "' is a folder; give the PNG's file name");
  const std::string stem = (png.parent_path() / png.stem()).string();
  const std::string dat = stem + ".dat", gp = stem + ".gp";
  check_outputs(png, options.out_option, options.out, gp, dat);
  std::vector<RunCurves> runs;
  for (const auto& folder : folders) runs.push_back(load_run_curves(folder));
  std::set<std::string> available;
  for (const auto& run : runs) {
    for (const auto& seed : run.seeds) {
      for (const auto& entry : seed) available.insert(entry.first);
    }
  }
  const auto list = [&] {
    std::string names;
    for (const auto& name : available) names += (names.empty() ? "" : ", ") + name;
    return names;
  };
  MLO_CHECK(!available.empty(), "mlo plot: the metrics.csv of ", folders.size() == 1 ? "" : "every ",
            "run given has no records yet");
  const std::vector<std::string> metrics =
      options.metrics.empty() ? default_metrics(runs) : options.metrics;
  MLO_CHECK(!metrics.empty(),
            "mlo plot: the runs have no training loss or validation metric to draw; choose with "
            "--metric from: ", list());
  for (const auto& metric : metrics) {
    MLO_CHECK(available.count(metric), "mlo plot: no run logged the metric '", metric,
              "'; the runs have: ", list());
  }

  fs::create_directories(png.parent_path());

  // The curves with a finite value, each one data block ("step mean low high"), blocks
  // separated by two blank lines and numbered for gnuplot's `index` in the order written.
  struct Drawn {
    size_t run;
    int index;
    Curve curve;
  };
  std::vector<std::vector<Drawn>> panels(metrics.size());
  int blocks = 0;
  for (size_t m = 0; m < metrics.size(); ++m) {
    for (size_t r = 0; r < runs.size(); ++r) {
      Curve curve = make_curve(runs[r], metrics[m], options.band);
      if (!curve.missing.empty() && curve.seeds > 0) {
        std::string names;
        for (const auto& name : curve.missing) names += (names.empty() ? "" : ", ") + name;
        std::cerr << "mlo plot: " << metrics[m] << " of " << runs[r].label << ": over "
                  << curve.seeds << " seeds; " << names << " logged none (yet)\n";
      }
      if (!drawable(curve)) continue;
      panels[m].push_back({r, blocks++, std::move(curve)});
    }
    if (panels[m].empty()) {
      std::cerr << "mlo plot: no run has a finite value of " << metrics[m]
                << ": its panel is left out\n";
    }
  }
  std::vector<size_t> shown;
  for (size_t m = 0; m < metrics.size(); ++m) {
    if (!panels[m].empty()) shown.push_back(m);
  }
  MLO_CHECK(!shown.empty(), "mlo plot: no run has a finite value of any metric asked for");
  write_file_atomically(dat, [&](std::ostream& out) {
    for (const size_t m : shown) {
      for (const auto& d : panels[m]) {
        out << "# block " << d.index << ": " << metrics[m] << ", " << runs[d.run].label
            << "\n# step mean low high\n";
        for (size_t i = 0; i < d.curve.steps.size(); ++i) {
          out << d.curve.steps[i] << ' ' << number(d.curve.mean[i]) << ' '
              << number(d.curve.low[i]) << ' ' << number(d.curve.high[i]) << '\n';
        }
        out << "\n\n";
      }
    }
  });

  const size_t columns = std::min<size_t>(shown.size(), 2);
  const size_t rows = (shown.size() + columns - 1) / columns;
  std::string title = "Learning curves:";
  for (const auto& run : runs) title += " " + run.label;
  write_file_atomically(gp, [&](std::ostream& out) {
    out << "# gnuplot script written by mlo plot; `gnuplot " << gp << "` redraws the chart\n"
        << "if (!exists(\"outfile\")) outfile = " << quoted(png.string()) << "\n"
        << "set terminal pngcairo size " << 720 * columns << "," << 460 * rows
        << " noenhanced font ',10'\n"
        << "set output outfile\n"
        << "set multiplot layout " << rows << "," << columns << " title " << quoted(title)
        << " font ',12'\n"
        << "set style fill transparent solid 0.2 noborder\n"
        << "set grid\nset key below\nset xlabel 'global step'\n";
    for (const size_t m : shown) {
      out << "set title " << quoted(metrics[m]) << "\nset ylabel " << quoted(metrics[m]) << "\n";
      std::string plots;
      for (const auto& d : panels[m]) {
        const std::string color =
            quoted(kColors[d.run % (sizeof(kColors) / sizeof(kColors[0]))]);
        const std::string source = quoted(dat) + " index " + std::to_string(d.index);
        if (runs[d.run].seeds.size() > 1) {
          plots += (plots.empty() ? "" : ", \\\n     ") + source +
                   " using 1:3:4 with filledcurves lc rgb " + color + " notitle";
        }
        plots += (plots.empty() ? "" : ", \\\n     ") + source +
                 " using 1:2 with linespoints pt 7 ps 0.4 lw 2 lc rgb " + color + " title " +
                 quoted(legend(runs[d.run], d.curve, options.band));
      }
      out << "plot " << plots << "\n";
    }
    out << "unset multiplot\n";
  });
  // gnuplot draws into a new file of its own beside the picture, moved over it when done.
  std::string drawn = png.string() + ".tmp-XXXXXX";
  const int fd = ::mkstemp(&drawn[0]);
  MLO_CHECK(fd >= 0, "mlo plot: cannot create a file beside '", png.string(), "': ",
            std::strerror(errno));
  ::close(fd);
  const std::string error = run_gnuplot(gp, drawn, png.string());
  MLO_CHECK(error.empty(), "mlo plot: ", error);
  return png.string();
}

PlotCommand::PlotCommand(CLI::App& app) {
  command_ = app.add_subcommand(
      "plot", "Learning curves of runs as a PNG (gnuplot): one panel per metric, runs overlaid");
  command_->add_option("runs", runs_,
                       "run folders (metrics.csv), or folders of mlo run --seeds (drawn as "
                       "the mean over seeds with a band)")
      ->required();
  command_->add_option("--metric", options_.metrics,
                       "metric to draw, named as in TensorBoard: classifier/loss, "
                       "valid/balanced_acc, test/acc (repeatable; default: each problem's loss "
                       "and the validation metrics)");
  command_->add_option("--out", options_.out, "the PNG (default: <first run>/curves.png)");
  command_->add_option("--band", band_, "the band of a --seeds folder: minmax or std")
      ->check(CLI::IsMember({"minmax", "std"}));
}

bool PlotCommand::parsed() const { return command_->parsed(); }

int PlotCommand::run() const {
  PlotOptions options = options_;
  options.band = band_ == "std" ? Band::kStd : Band::kMinMax;
  const std::string png = plot_runs(runs_, options);
  std::cout << "curves in " << png << "\n";
  return 0;
}

}  // namespace cli
}  // namespace mlo
