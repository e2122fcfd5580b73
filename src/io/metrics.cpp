#include <mlo/base/error.h>
#include <mlo/base/number_text.h>
#include <mlo/io/metrics.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>
#include <vector>

namespace mlo {
namespace io {
namespace {

// Keeps the lines of `path` whose leading step (the first number on the line) is <= `step`.
void truncate_after(const std::string& path, int64_t step, bool has_header) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::vector<std::string> kept;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first && has_header) {
      kept.push_back(line);
      first = false;
      continue;
    }
    first = false;
    const auto digit = line.find_first_of("0123456789");
    if (digit == std::string::npos) continue;
    if (std::stoll(line.substr(digit)) <= step) kept.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : kept) out << l << '\n';
}

// The shortest text that reads back as `value` exactly (full precision, as JSON writes it).
std::string number(double value) {
  if (!std::isfinite(value))
    return std::isnan(value) ? "NaN" : (value > 0 ? "Infinity" : "-Infinity");
  return number_text(value);
}

}  // namespace

std::string tensorboard_tag(const std::string& source, const std::string& name) {
  if (source == "validation" && name.rfind("valid/", 0) == 0) return name;
  return source + "/" + name;
}

MetricsWriter::MetricsWriter(const std::string& dir, int64_t resume_step, bool tensorboard)
    : csv_path_(dir + "/metrics.csv"), jsonl_path_(dir + "/metrics.jsonl") {
  if (tensorboard) tensorboard_.emplace(dir + "/tb", resume_step);
  const bool resume = resume_step >= 0;
  if (resume) {
    truncate_after(csv_path_, resume_step, /*has_header=*/true);
    truncate_after(jsonl_path_, resume_step, /*has_header=*/false);
  }
  const bool fresh_csv = !resume || !std::ifstream(csv_path_).good();
  csv_.open(csv_path_, resume ? std::ios::app : std::ios::trunc);
  jsonl_.open(jsonl_path_, resume ? std::ios::app : std::ios::trunc);
  MLO_CHECK(csv_.good() && jsonl_.good(), "cannot write the metrics files in '", dir, "'");
  if (fresh_csv || csv_.tellp() == 0) csv_ << "step,source,metric,value\n" << std::flush;
}

void MetricsWriter::write(int64_t step, const std::string& source, const Metrics& metrics) {
  // NOTE: ordered, so "step" leads every line (resuming truncates by the first number).
  nlohmann::ordered_json json;
  json["step"] = step;
  json["source"] = source;
  for (const auto& [name, value] : metrics) {
    MLO_CHECK(is_metric_name(name), "metrics of '", source, "' at step ", step, ": the name '",
              name, "' has a space, comma or quote (build names from free text with ",
              "mlo::metric_segment)");
  }
  for (const auto& [name, value] : metrics) {
    csv_ << step << ',' << source << ',' << name << ',' << number(value) << '\n';
    // JSON has no NaN or infinity: those are written as strings ("NaN", "Infinity").
    if (std::isfinite(value)) {
      json[name] = value;
    } else {
      json[name] = number(value);
    }
  }
  jsonl_ << json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
  csv_.flush();
  jsonl_.flush();
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> scalars;
    scalars.reserve(metrics.size());
    for (const auto& [name, value] : metrics) {
      scalars.emplace_back(tensorboard_tag(source, name), value);
    }
    tensorboard_->scalars(step, scalars);
  }
}

void MetricsWriter::text(int64_t step, const std::string& tag, const std::string& markdown) {
  if (tensorboard_) tensorboard_->text(step, tag, markdown);
}

}  // namespace io
}  // namespace mlo
