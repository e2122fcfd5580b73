#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include <mlo/base/number_text.h>
#include <mlo/io/metrics.h>

#include "metrics_files.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <vector>

namespace mlo {
namespace io {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCsvHeader = "step,source,metric,value";

// A step as the writer writes it: plain digits.
bool parse_step(const std::string& text, int64_t* step) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *step = std::stoll(text);
  return true;
}

// Why `line` is not a record of metrics.csv, "" when it is one (its step in `step`). The source
// (a problem's name) may hold commas; the metric's name and the value hold none.
std::string csv_record(const std::string& line, int64_t* step) {
  const size_t first = line.find(','), last = line.rfind(',');
  const size_t before_last =
      last == std::string::npos || last == 0 ? std::string::npos : line.rfind(',', last - 1);
  if (first == std::string::npos || before_last == std::string::npos || before_last <= first) {
    return "expected step,source,metric,value";
  }
  if (!parse_step(line.substr(0, first), step)) return "the step is not a whole number";
  if (before_last == first + 1) return "the source is empty";
  if (last == before_last + 1) return "the metric's name is empty";
  const std::string value = line.substr(last + 1);
  char* end = nullptr;
  std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size()) return "the value is not a number";
  return "";
}

// Why `line` is not a record of metrics.jsonl, "" when it is one (its step in `step`).
std::string jsonl_record(const std::string& line, int64_t* step) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    return "not a JSON object";
  }
  if (!json.is_object()) return "not a JSON object";
  const auto at = json.find("step");
  if (at == json.end() || !at->is_number_unsigned()) return "no whole \"step\"";
  const auto source = json.find("source");
  if (source == json.end() || !source->is_string()) return "no \"source\" name";
  *step = at->get<int64_t>();
  return "";
}

// The step a line begins with, as the writer begins every record ("12,..." or
// {"step":12,...}); false when it does not begin so.
bool leading_step(const std::string& line, bool json, int64_t* step) {
  const std::string prefix = json ? "{\"step\":" : "";
  if (line.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t end = line.find_first_of(",}", prefix.size());
  if (end == std::string::npos) return false;
  return parse_step(line.substr(prefix.size(), end - prefix.size()), step);
}

// The line as a warning quotes it: at most 60 bytes, each but printable ASCII as '?' (a damaged
// file may hold anything).
std::string quoted_line(const std::string& line) {
  std::string out = line.substr(0, 60);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return "'" + out + (line.size() > 60 ? "...'" : "'");
}

// Readies one metrics file of a resumed run for appending, keeping its records up to global
// step `step` and dropping those written after the saved state; returns what it had to repair
// ("" when the file was as expected). `header`: the CSV's first line, nullptr for JSON lines.
std::string resume_file(const std::string& path, int64_t step, const char* header,
                        std::string (*record)(const std::string&, int64_t*)) {
  const std::string fresh = header != nullptr ? std::string(header) + "\n" : std::string();
  const auto start_again = [&] {
    write_file_atomically(path, [&](std::ostream& out) { out << fresh; });
  };
  const std::string started =
      std::string("a new one is started") + (header != nullptr ? " with its header" : "") +
      "; the records of the steps up to " + std::to_string(step) + " (before the resume) are ";
  std::error_code error;
  if (!fs::exists(path, error)) {
    start_again();
    return "the metrics file '" + path + "' is missing: " + started + "missing from it";
  }
  std::ifstream in(path, std::ios::binary);
  MLO_CHECK(in.good(), "cannot read the metrics file '", path,
            "' to resume the run: ", std::strerror(errno));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  MLO_CHECK(!in.bad(), "cannot read the metrics file '", path, "' to resume the run");
  in.close();
  if (text.empty() && header != nullptr) {
    start_again();
    return "the metrics file '" + path + "' is empty: " + started + "missing from it";
  }

  // Every line must be a record (the CSV's first, its header); records after `step` are
  // dropped. NOTE: a last line without its newline was cut off by a crash while it was being
  // written, after the saved state: it is dropped with the other later records.
  std::string kept, damage;
  bool changed = false;
  int64_t number = 0;
  for (size_t begin = 0; begin < text.size() && damage.empty();) {
    const size_t newline = text.find('\n', begin);
    const bool cut = newline == std::string::npos;
    const std::string line = text.substr(begin, (cut ? text.size() : newline) - begin);
    begin = cut ? text.size() : newline + 1;
    ++number;
    const std::string where = "line " + std::to_string(number) + " (" + quoted_line(line) + ")";
    if (header != nullptr && number == 1) {
      if (line == header) {
        kept += line + '\n';
        changed = changed || cut;
      } else {
        damage = where + " is not the header '" + header + "'";
      }
      continue;
    }
    int64_t at = -1;
    const std::string why = record(line, &at);
    if (why.empty()) {
      if (at <= step) {
        kept += line + '\n';
        changed = changed || cut;
      } else {
        changed = true;  // written after the saved state
      }
    } else if (cut && leading_step(line, /*json=*/header == nullptr, &at) && at > step) {
      changed = true;
    } else {
      damage = where + ": " + why;
    }
  }
  if (damage.empty()) {
    // NOTE: written whole beside it and renamed over it, so that a crash while dropping the
    // later records leaves the file as it was, never half of it.
    if (changed) write_file_atomically(path, [&](std::ostream& out) { out << kept; });
    return "";
  }
  // Not a file of mlo's: kept as it is under another name, never appended to or deleted.
  const std::string aside = unused_timestamped(path + ".damaged-");
  fs::rename(path, aside, error);
  MLO_CHECK(!error, "the metrics file '", path, "' is not one mlo wrote (", damage,
            ") and cannot be moved aside to '", aside, "': ", error.message(),
            "; move it away yourself, then resume");
  start_again();
  return "the metrics file '" + path + "' is not one mlo wrote (" + damage +
         "): it is kept as it was in '" + aside + "', and " + started + "in that file only";
}

// The shortest text that reads back as `value` exactly (full precision, as JSON writes it).
std::string number(double value) {
  if (!std::isfinite(value))
    return std::isnan(value) ? "NaN" : (value > 0 ? "Infinity" : "-Infinity");
  return number_text(value);
}

}  // namespace

std::optional<int64_t> last_metrics_step(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl", std::ios::binary);
  if (!in.good()) return std::nullopt;
  std::optional<int64_t> last;
  // (only lines with their newline: a last line without it was cut off by a crash)
  const std::string text(std::istreambuf_iterator<char>(in), {});
  for (size_t begin = 0, newline; (newline = text.find('\n', begin)) != std::string::npos;
       begin = newline + 1) {
    int64_t step = 0;
    if (leading_step(text.substr(begin, newline - begin), /*json=*/true, &step)) last = step;
  }
  return last;
}

MetricsWriter::MetricsWriter(const std::string& dir, int64_t resume_step)
    : csv_path_(dir + "/metrics.csv"), jsonl_path_(dir + "/metrics.jsonl") {
  const bool resume = resume_step >= 0;
  if (resume) {
    for (const auto& repair :
         {resume_file(csv_path_, resume_step, kCsvHeader, &csv_record),
          resume_file(jsonl_path_, resume_step, /*header=*/nullptr, &jsonl_record)}) {
      if (repair.empty()) continue;
      spdlog::warn("{}", repair);
      warnings_.push_back(repair);
    }
  }
  csv_.open(csv_path_, resume ? std::ios::app : std::ios::trunc);
  jsonl_.open(jsonl_path_, resume ? std::ios::app : std::ios::trunc);
  MLO_CHECK(csv_.good() && jsonl_.good(), "cannot write the metrics files in '", dir, "'");
  if (!resume) csv_ << kCsvHeader << '\n' << std::flush;
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
}

}  // namespace io
}  // namespace mlo
