#include "curves.h"

#include "seeds.h"

#include <mlo/base/error.h>
#include <mlo/io/metrics.h>
#include <mlo/io/tensorboard.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

namespace mlo {
namespace cli {
namespace {

namespace fs = std::filesystem;

bool is_seed_folder(const fs::path& path) {
  return fs::is_directory(path) && seed_of_folder(path.filename().string()) >= 0 &&
         fs::exists(path / "metrics.csv");
}

}  // namespace

RunMetrics read_run_metrics(const std::string& folder) {
  const std::string path = (fs::path(folder) / "metrics.csv").string();
  std::ifstream in(path);
  MLO_CHECK(in.good(), "cannot read '", path, "'");
  RunMetrics metrics;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 || line.empty()) continue;  // the header
    // step,source,metric,value (names hold no commas: is_metric_name)
    const size_t a = line.find(','), b = line.find(',', a + 1), c = line.find(',', b + 1);
    MLO_CHECK(c != std::string::npos && line.find(',', c + 1) == std::string::npos, path, ":",
              number, ": expected step,source,metric,value, got '", line, "'");
    char* end = nullptr;
    const long long step = std::strtoll(line.c_str(), &end, 10);
    MLO_CHECK(end == line.c_str() + a && a > 0, path, ":", number, ": not a step: '",
              line.substr(0, a), "'");
    const double value = std::strtod(line.c_str() + c + 1, &end);
    MLO_CHECK(end != line.c_str() + c + 1 && *end == '\0', path, ":", number,
              ": not a number: '", line.substr(c + 1), "'");
    const std::string tag =
        io::tensorboard_tag(line.substr(a + 1, b - a - 1), line.substr(b + 1, c - b - 1));
    metrics[tag][step] = value;
  }
  return metrics;
}

RunCurves load_run_curves(const std::string& folder) {
  const fs::path path(folder);
  RunCurves run;
  run.folder = folder;
  run.label = fs::absolute(path).lexically_normal().filename().string();
  if (run.label.empty()) run.label = fs::absolute(path).lexically_normal().parent_path().filename();
  if (fs::exists(path / "metrics.csv")) {
    run.seeds.push_back(read_run_metrics(folder));
    run.seed_names.emplace_back();
    return run;
  }
  MLO_CHECK(fs::is_directory(path), "'", folder, "' is not a run folder (no such folder)");
  std::vector<fs::path> seeds;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (is_seed_folder(entry.path())) seeds.push_back(entry.path());
  }
  MLO_CHECK(!seeds.empty(), "'", folder, "' holds neither metrics.csv (a run) nor ",
            "seed_<s>/metrics.csv (a run of mlo run --seeds)");
  std::sort(seeds.begin(), seeds.end(), [](const fs::path& a, const fs::path& b) {
    return seed_of_folder(a.filename().string()) < seed_of_folder(b.filename().string());
  });
  for (const auto& seed : seeds) {
    run.seeds.push_back(read_run_metrics(seed.string()));
    run.seed_names.push_back(seed.filename().string());
  }
  return run;
}

std::vector<std::string> default_metrics(const std::vector<RunCurves>& runs) {
  std::set<std::string> losses, validation;
  for (const auto& run : runs) {
    for (const auto& seed : run.seeds) {
      for (const auto& entry : seed) {
        const std::string& tag = entry.first;
        const size_t slash = tag.find('/');
        const std::string source = tag.substr(0, slash), name = tag.substr(slash + 1);
        if (source == "valid") {
          if (name.find('/') == std::string::npos) validation.insert(tag);
        } else if (source != "test" && source != "validation" && name == "loss") {
          losses.insert(tag);
        }
      }
    }
  }
  std::vector<std::string> out(losses.begin(), losses.end());
  out.insert(out.end(), validation.begin(), validation.end());
  return out;
}

Curve make_curve(const RunCurves& run, const std::string& metric, Band band) {
  Curve curve;
  std::vector<const std::map<int64_t, double>*> seeds;
  for (size_t s = 0; s < run.seeds.size(); ++s) {
    const auto found = run.seeds[s].find(metric);
    if (found == run.seeds[s].end()) {
      curve.missing.push_back(run.seed_names.at(s));
    } else {
      seeds.push_back(&found->second);
    }
  }
  curve.seeds = static_cast<int>(seeds.size());
  if (seeds.empty()) return curve;
  for (const auto& [step, first] : *seeds.front()) {
    std::vector<double> values;
    for (const auto* seed : seeds) {
      const auto at = seed->find(step);
      if (at == seed->end()) break;
      values.push_back(at->second);
    }
    if (values.size() != seeds.size()) continue;
    double sum = 0.0;
    for (const double v : values) sum += v;
    const double mean = sum / static_cast<double>(values.size());
    double low = *std::min_element(values.begin(), values.end());
    double high = *std::max_element(values.begin(), values.end());
    if (band == Band::kStd) {
      double squares = 0.0;
      for (const double v : values) squares += (v - mean) * (v - mean);
      const double std =
          values.size() > 1 ? std::sqrt(squares / static_cast<double>(values.size() - 1)) : 0.0;
      low = mean - std;
      high = mean + std;
    }
    curve.steps.push_back(step);
    curve.mean.push_back(mean);
    curve.low.push_back(low);
    curve.high.push_back(high);
  }
  return curve;
}

}  // namespace cli
}  // namespace mlo
