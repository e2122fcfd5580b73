#pragma once
/// \file
/// The memory ablation's outputs (run/ablation.h): a Markdown table, CSV, JSON and a PNG bar
/// chart drawn by gnuplot (Debian's `gnuplot-nox`), each saying whether the data was real or
/// synthetic.
///
/// ```
/// auto result = mlo::run::run_ablation(path, {}, mlo::run::AblationOptions());
/// spdlog::info("\n{}", mlo::run::ablation_markdown(result));
/// mlo::run::write_ablation("runs/ablation", result);   // ablation.{csv,json,md,png}
/// ```

#include "ablation.h"

#include <string>

namespace mlo {
namespace run {

/// The table (one row per measured row, then the rows not measured and the notes), headed by
/// the experiment, the data (REAL or SYNTHETIC), the device, the threads and the batch.
std::string ablation_markdown(const AblationResult& result);

/// One line per row; the first two lines are a `# data: real|synthetic` comment and the header.
/// Bytes as integers, times in seconds, ratios as decimals.
std::string ablation_csv(const AblationResult& result);

/// {"experiment":..., "data":"real"|"synthetic", "rows":[{"key":..., "peak_bytes":...}, ...]}.
std::string ablation_json(const AblationResult& result);

/// One rank's measurement (`measure_ablation_row`) as JSON, and back: how `mlo ablate-rank`
/// hands its figures to the `mlo ablate` that started it.
std::string row_measurement_json(const AblationRowResult& row);
/// The measurement `row_measurement_json` wrote, read back; throws `mlo::Error` when `text`
/// does not parse.
AblationRowResult row_measurement_from_json(const std::string& text);

/// Draws the chart, two panels: memory (peak per row as bars, the floor of each row marked, the
/// baseline's peak as a line) and time (each row's time per meta-iteration over the baseline's,
/// with its range over the rounds), titled with the model as run, with gnuplot into `png_path`, writing the data and the script beside it
/// (`<png_path without .png>.dat`, `.gp`). Returns "" on success, else why there is no chart
/// (gnuplot missing or failing); never throws for that.
std::string write_ablation_chart(const AblationResult& result, const std::string& png_path);

/// Paths `write_ablation` wrote.
struct AblationFiles {
  /// `<folder>/ablation.md`.
  std::string markdown, csv, json, png;
  std::string chart_error;  ///< why there is no PNG ("" when there is one)
  /// \var csv
  /// \brief `<folder>/ablation.csv`.
  /// \var json
  /// \brief `<folder>/ablation.json`.
  /// \var png
  /// \brief `<folder>/ablation.png`, or "" when the chart could not be drawn (`chart_error`).
};

/// Writes ablation.md, ablation.csv, ablation.json (atomically) and ablation.png into `folder`
/// (created if needed).
AblationFiles write_ablation(const std::string& folder, const AblationResult& result);
/// `write_ablation` without the chart: the report of the rows finished so far.
AblationFiles write_ablation_tables(const std::string& folder, const AblationResult& result);

}  // namespace run
}  // namespace mlo
