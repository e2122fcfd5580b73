#include "run_record.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mlo {
namespace io {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
  write_file_atomically(path.string(), [&](std::ostream& out) { out << text; });
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A metric value as JSON: a number, or a string for NaN and the infinities (which JSON lacks).
nlohmann::json json_value(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "NaN" : (value > 0 ? "Infinity" : "-Infinity");
}

Metrics metrics_of(const nlohmann::json& section) {
  Metrics out;
  if (!section.is_object()) return out;
  for (const auto& [name, value] : section.items()) {
    if (value.is_number()) out[name] = value.get<double>();
  }
  return out;
}

}  // namespace

std::optional<RunResults> finished_results(const std::string& dir, int64_t train_iters) {
  const fs::path path = fs::path(dir) / "results.json";
  if (!fs::exists(path)) return std::nullopt;
  RunResults results;
  try {
    const auto finished = nlohmann::json::parse(read_file(path));
    results.steps = finished.value("steps", int64_t{0});
    results.evaluated_step = finished.value("evaluated_step", results.steps);
    results.stopped_early = finished.value("stopped_early", false);
    results.test = metrics_of(finished.value("test", nlohmann::json::object()));
    results.valid = metrics_of(finished.value("valid", nlohmann::json::object()));
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path.string() + "' is not results.json as mlo writes it (" + e.what() +
                "); the run there finished, but its results are damaged");
  }
  if (results.steps < train_iters && !results.stopped_early) return std::nullopt;
  return results;
}

void write_results(const std::string& dir, const RunResults& results) {
  nlohmann::json json;
  json["experiment"] = results.experiment;
  json["meta"] = to_json(results.meta);
  json["steps"] = results.steps;
  json["evaluated_step"] = results.evaluated_step;
  json["stopped_early"] = results.stopped_early;
  json["synthetic"] = results.synthetic;
  json["test"] = nlohmann::json::object();
  json["valid"] = nlohmann::json::object();
  for (const auto& [name, value] : results.test) json["test"][name] = json_value(value);
  for (const auto& [name, value] : results.valid) json["valid"][name] = json_value(value);
  write_file(fs::path(dir) / "results.json",
             json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void record_config(const std::string& dir, const std::string& resolved, bool resume, int64_t start,
                   const std::function<bool(const std::string&)>& same) {
  const fs::path out(dir);
  const fs::path record = out / "config.yaml";
  if (!resume || !fs::exists(record)) {
    write_file(record, resolved);
    return;
  }
  const std::string saved = read_file(record);
  if (saved == resolved || (same && same(saved))) return;
  // The first configuration resumed with goes to config.resumed.yaml; another one later never
  // replaces it, but goes beside it, named by the step it resumed at.
  fs::path now = out / "config.resumed.yaml";
  const auto recorded = [&](const fs::path& path) {
    return fs::exists(path) && read_file(path) == resolved;
  };
  for (int i = 1; fs::exists(now) && !recorded(now); ++i) {
    now = out / ("config.resumed.step" + std::to_string(start) +
                 (i == 1 ? std::string() : "-" + std::to_string(i)) + ".yaml");
  }
  if (!recorded(now)) write_file(now, resolved);
  spdlog::warn(
      "resuming with a configuration that differs from {} (kept as it was); the run "
      "continues with the new one, recorded in {}",
      record.string(), now.string());
}

}  // namespace io
}  // namespace mlo
