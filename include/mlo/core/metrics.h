#pragma once
/// \file
/// Named scalar metrics, their names and their console form. A problem records metrics as it
/// steps (`Problem::log_metric`), an experiment returns them from its evaluation; the console
/// shows a few *headline* metrics per line at 4 significant digits, and a run's metrics files
/// keep every metric at full precision.
///
/// ```
/// mlo::Metrics m{{"loss", 0.674874}, {"acc", 0.75}, {"lr", 0.05}, {"weight_std", 0.0920217}};
/// mlo::format_headline(m, {"loss", "acc", "lr"});  // "loss 0.6749  acc 0.75  lr 0.05"
/// "valid/acc/" + mlo::metric_segment("ankle boot");  // "valid/acc/ankle_boot"
/// ```

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace mlo {

/// Named scalar metrics (loss, accuracy, ...), ordered by name for stable files.
using Metrics = std::map<std::string, double>;

/// `text` made into one segment of a metric name, the one way every metric name built from
/// free text (a class name) is made: each character other than a letter, a digit or one of
/// `_ - . = +` becomes '_'. Spaces would break the `name value` console format and the CSV
/// file, '/' would split the segment in two ("ankle boot" -> "ankle_boot", "t-shirt/top" ->
/// "t-shirt_top").
std::string metric_segment(const std::string& text);

/// Whether `name` can name a metric: not empty, and no whitespace, comma, quote or control
/// character (segments separated by '/', each as `metric_segment` makes them).
bool is_metric_name(const std::string& name);

/// `value` at 4 significant digits, as the console shows metrics ("0.6749", "0.05", "1.235e+04",
/// "nan").
std::string format_metric(double value);

/// The console form of the metrics of `names` that `metrics` holds, in the order of `names`
/// (absent ones are skipped): "loss 0.6749  acc 0.75  lr 0.05".
std::string format_headline(const Metrics& metrics, const std::vector<std::string>& names);

/// Every metric of `metrics`, by name, in the console form (for debug logs).
std::string format_all(const Metrics& metrics);

/// Characters of a console log message after its "[2026-11-24 12:46:19] [info] " prefix (29):
/// every info line fits a 120-column terminal.
inline constexpr std::size_t kConsoleWidth = 91;

/// `text`'s lines (split at '\n'); a line longer than `width` is wrapped at spaces: between
/// "name value" pairs where it separates them by two spaces, else between words. Continuation
/// lines start with two spaces where that fits; only a single word longer than the width makes
/// a line longer than it. How the console shows free text and long metric lines.
std::vector<std::string> console_lines(const std::string& text,
                                       std::size_t width = kConsoleWidth);

}  // namespace mlo
