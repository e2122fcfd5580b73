#include "run_record.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

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

// key path ("engine.train_iters") -> value text, of YAML as a run records it (block mappings,
// one key a line); a line that is no "key: value" continues the value of the key before it.
std::map<std::string, std::string> flat_keys(const std::string& text) {
  std::map<std::string, std::string> out;
  std::vector<std::pair<size_t, std::string>> open;  // (indent, key) of the enclosing mappings
  std::string last;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos || line[indent] == '#') continue;
    const std::string rest = line.substr(indent);
    size_t colon = rest.find(": ");
    if (colon == std::string::npos && rest.back() == ':') colon = rest.size() - 1;
    if (rest.rfind("- ", 0) == 0 || colon == std::string::npos || (last.empty() && indent > 0)) {
      if (!last.empty()) out[last] += "\n" + rest;
      continue;
    }
    while (!open.empty() && open.back().first >= indent) open.pop_back();
    std::string path;
    for (const auto& entry : open) path += entry.second + ".";
    path += rest.substr(0, colon);
    const std::string value = colon + 2 <= rest.size() ? rest.substr(colon + 2) : std::string();
    out[path] = value;
    last = path;
    if (value.empty()) open.emplace_back(indent, rest.substr(0, colon));
  }
  return out;
}

// Keys that say how long a run goes on, what it reports and where it runs, but not what its
// steps compute (the seed has a check of its own).
bool arithmetic_key(const std::string& key) {
  static const char* const kOthers[] = {
      "name", "seed", "threads", "device", "engine.train_iters", "engine.valid_step",
      "engine.log_step", "engine.track_memory", "engine.timeout_s", "engine.save_step",
      "engine.tensorboard", "engine.backend", "engine.cudnn_benchmark"};
  for (const char* other : kOthers) {
    if (key == other) return false;
  }
  const std::string log = ".log_step";
  return !(key.rfind("problems.", 0) == 0 && key.size() > log.size() &&
           key.compare(key.size() - log.size(), log.size(), log) == 0);
}

// Whether two values as a writer wrote them mean the same: the same text, or the same number
// (another writer's form of it: 5e-04, 0.0005).
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a);
  const double y = std::strtod(b.c_str(), &end_b);
  return !a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0' && x == y;
}

// "engine.train_iters (200 -> 400), seed (0 -> 4)": the keys whose values differ (only those
// `counted`, and in both, when given: a key one writer has and another lacks is no change of
// what the steps compute).
std::string changed_keys(const std::string& before, const std::string& after,
                         bool (*counted)(const std::string&) = nullptr) {
  auto a = flat_keys(before), b = flat_keys(after);
  if (counted != nullptr) {
    for (auto* keys : {&a, &b}) {
      const auto& other = keys == &a ? b : a;
      for (auto it = keys->begin(); it != keys->end();) {
        const bool kept = counted(it->first) && other.count(it->first) > 0;
        it = kept ? std::next(it) : keys->erase(it);
      }
    }
  }
  const auto shown = [](const std::string& value) {
    const std::string one = value.substr(0, value.find('\n'));
    return one.empty() ? std::string("(none)") : one.size() > 40 ? one.substr(0, 40) + "..." : one;
  };
  std::vector<std::string> changes;
  for (const auto& [key, value] : a) {
    const auto other = b.find(key);
    if (other == b.end()) {
      changes.push_back(key + " (" + shown(value) + " -> absent)");
    } else if (counted != nullptr ? !same_value(value, other->second) : other->second != value) {
      changes.push_back(key + " (" + shown(value) + " -> " + shown(other->second) + ")");
    }
  }
  for (const auto& [key, value] : b) {
    if (a.count(key) == 0) changes.push_back(key + " (absent -> " + shown(value) + ")");
  }
  constexpr size_t kNamed = 8;
  std::string out;
  for (size_t i = 0; i < changes.size() && i < kNamed; ++i) out += (i ? ", " : "") + changes[i];
  if (changes.size() > kNamed) {
    out += " and " + std::to_string(changes.size() - kNamed) + " more";
  }
  return out;
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

std::string arithmetic_changes(const std::string& before, const std::string& after) {
  return changed_keys(before, after, arithmetic_key);
}

std::vector<std::string> recorded_configs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool record = name == "config.yaml" || (name.rfind("config.resumed", 0) == 0 &&
                                                  entry.path().extension() == ".yaml");
    if (record && entry.is_regular_file(error)) out.push_back(read_file(entry.path()));
  }
  return out;
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
  const std::string changes = changed_keys(saved, resolved);
  spdlog::warn(
      "resuming with a configuration that differs from {}{} (kept as it was); the run "
      "continues with the new one, recorded in {}",
      record.string(), changes.empty() ? std::string() : " in " + changes, now.string());
}

}  // namespace io
}  // namespace mlo
