#include "seeds.h"

#include "seed_stats.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

namespace mlo {
namespace cli {
namespace {

namespace fs = std::filesystem;

std::string fixed(double value, int digits = 4) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

void write_text(const fs::path& path, const std::string& text) {
  write_file_atomically(path.string(), [&](std::ostream& out) { out << text; });
}

}  // namespace

const std::vector<std::string>& summary_metrics() {
  static const std::vector<std::string> names{"test/acc",  "test/balanced_acc",  "test/rare3_acc",
                                              "valid/acc", "valid/balanced_acc", "valid/rare3_acc"};
  return names;
}

std::vector<std::string> summary_order(
    const std::map<std::string, std::map<int64_t, double>>& results, bool per_class) {
  std::vector<std::string> order;
  for (const auto& metric : summary_metrics()) {
    if (results.count(metric) > 0) order.push_back(metric);
  }
  for (const auto& entry : results) {
    const std::string& metric = entry.first;
    // ("test/acc" and "valid/acc" have one '/', a class's "test/acc/class3" two)
    if (!per_class && std::count(metric.begin(), metric.end(), '/') > 1) continue;
    if (std::find(order.begin(), order.end(), metric) == order.end()) order.push_back(metric);
  }
  return order;
}

int64_t seed_of_folder(const std::string& name) {
  if (name.rfind("seed_", 0) != 0) return -1;
  // seed_<digits> only: "seed_03" or "seed_3abc" would collide with seed_3.
  const std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 1 && digits[0] == '0')) {
    return -1;
  }
  return std::stoll(digits);
}

namespace {

// One results.json, read whole: its experiment, its "meta" seed and its metrics.
ResultsFile read_results(const fs::path& path, std::optional<int64_t> folder_seed) {
  ResultsFile file;
  file.path = path.string();
  file.single = !folder_seed;
  std::ifstream in(path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + file.path + "' is not valid JSON (" + e.what() +
                "); it is not results.json as mlo run writes it");
  }
  MLO_CHECK(json.is_object(), "'", file.path,
            "' is not a JSON object with \"test\" and \"valid\" sections");
  if (json.contains("experiment") && json["experiment"].is_string()) {
    file.experiment = json["experiment"].get<std::string>();
  }
  // A seed folder's seed is its name's; one run's is the one its results record (0 where none).
  const nlohmann::json meta = json.value("meta", nlohmann::json::object());
  file.seed = folder_seed ? *folder_seed
              : meta.is_object() && meta.contains("seed") && meta["seed"].is_number_integer()
                  ? meta["seed"].get<int64_t>()
                  : 0;
  for (const char* section : {"test", "valid"}) {
    if (!json.contains(section)) continue;
    MLO_CHECK(json[section].is_object(), "'", file.path, "': \"", section,
              "\" is not an object of metric values (it is ", json[section].type_name(), ")");
    for (const auto& [key, value] : json[section].items()) {
      double number = 0;
      if (value.is_number()) {
        number = value.get<double>();
      } else if (value.is_string() && (value == "NaN" || value == "Infinity" ||
                                       value == "-Infinity")) {
        // How the runner writes a diverged metric: keep it, a dropped seed would bias the mean.
        const std::string text = value.get<std::string>();
        number = text == "NaN" ? std::nan("") : (text[0] == '-' ? -HUGE_VAL : HUGE_VAL);
      } else {
        throw Error("'" + file.path + "': \"" + section + "\"." + key + " is " + value.dump() +
                    ", not a number (or \"NaN\", \"Infinity\", \"-Infinity\")");
      }
      // Test metrics are bare ("acc"), validation metrics already "valid/acc".
      file.metrics[std::string(section) == "test" ? "test/" + key : key] = number;
    }
  }
  return file;
}

// metric -> seed -> value, of the results found in `dir`.
std::map<std::string, std::map<int64_t, double>> by_metric(const std::vector<ResultsFile>& files,
                                                           const std::string& dir) {
  std::map<std::string, std::map<int64_t, double>> out;
  for (const ResultsFile& file : files) {
    for (const auto& [metric, value] : file.metrics) out[metric][file.seed] = value;
  }
  MLO_CHECK(!out.empty(), "no results.json in '", dir, "' and no seed_<s>/results.json under it "
            "(made by mlo run CONFIG, or mlo run CONFIG --seeds ...)");
  return out;
}

}  // namespace

std::vector<ResultsFile> results_files(const std::string& dir, const std::vector<int64_t>& only) {
  MLO_CHECK(fs::is_directory(dir), "'", dir, "' is not a run folder or a folder of seed runs");
  const auto wanted = [&](int64_t seed) {
    return only.empty() || std::find(only.begin(), only.end(), seed) != only.end();
  };
  std::vector<ResultsFile> files;
  const fs::path single = fs::path(dir) / "results.json";
  if (fs::exists(single)) {
    ResultsFile file = read_results(single, std::nullopt);
    if (wanted(file.seed)) files.push_back(std::move(file));
    return files;
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("seed_", 0) != 0) continue;
    const fs::path results = entry.path() / "results.json";
    const int64_t seed = seed_of_folder(name);
    if (!fs::exists(results) || seed < 0 || !wanted(seed)) continue;
    files.push_back(read_results(results, seed));
  }
  std::sort(files.begin(), files.end(),
            [](const ResultsFile& a, const ResultsFile& b) { return a.seed < b.seed; });
  return files;
}

std::map<std::string, std::map<int64_t, double>> read_seed_results(
    const std::string& dir, const std::vector<int64_t>& only) {
  return by_metric(results_files(dir, only), dir);
}

std::string write_summary(const std::string& dir, const std::vector<int64_t>& only) {
  const auto results = read_seed_results(dir, only);
  nlohmann::ordered_json json;
  json["folder"] = dir;
  std::string csv = "metric,n,mean,std,se,seeds,values\n";
  std::string md = "| metric | n | mean | std | se |\n| --- | --- | --- | --- | --- |\n";
  const std::vector<std::string> tabled = summary_order(results, /*per_class=*/false);
  for (const auto& metric : summary_order(results, /*per_class=*/true)) {
    const auto found = results.find(metric);
    std::vector<double> values;
    std::vector<int64_t> seeds;
    std::string seed_list, value_list;
    for (const auto& [seed, value] : found->second) {
      seeds.push_back(seed);
      values.push_back(value);
      seed_list += (seed_list.empty() ? "" : " ") + std::to_string(seed);
      value_list += (value_list.empty() ? "" : " ") + fixed(value, 6);
    }
    const Summary s = summarize(values);
    json["metrics"][metric] = {{"n", s.n},   {"mean", s.mean}, {"std", s.std},
                               {"se", s.se}, {"seeds", seeds}, {"values", values}};
    csv += metric + "," + std::to_string(s.n) + "," + fixed(s.mean, 6) + "," + fixed(s.std, 6) +
           "," + fixed(s.se, 6) + "," + seed_list + "," + value_list + "\n";
    if (std::find(tabled.begin(), tabled.end(), metric) == tabled.end()) continue;
    md += "| " + metric + " | " + std::to_string(s.n) + " | " + fixed(s.mean) + " | " +
          fixed(s.std) + " | " + fixed(s.se) + " |\n";
  }
  write_text(fs::path(dir) / "summary.json", json.dump(2) + "\n");
  write_text(fs::path(dir) / "summary.csv", csv);
  write_text(fs::path(dir) / "summary.md", md);
  return md;
}

std::string run_seeds(const run::RunConfig& config, const RunOptions& options,
                      const std::vector<int64_t>& seeds, bool* interrupted,
                      const RaiseAt& raise_at) {
  if (interrupted != nullptr) *interrupted = false;
  const std::string dir = options.dir().empty() ? "runs/" + config.name : options.dir();
  for (int64_t seed : seeds) {
    RunOptions one = options;
    one.dir((fs::path(dir) / ("seed_" + std::to_string(seed))).string());
    const fs::path out(one.dir());
    if (options.resume() && fs::exists(out / "results.json")) {
      std::cout << "seed " << seed << ": kept " << one.dir() << "/results.json\n";
      continue;
    }
    // A seed that saved no state starts over on --resume: whatever it left (a log, metrics of
    // its first steps) is moved aside, not deleted.
    // (state.pt, or under zero1/zero2/zero3 each rank's state.rank<r>.pt: rank 0's is there)
    one.resume(options.resume() &&
               (fs::exists(out / "state.pt") || fs::exists(out / "state.rank0.pt")));
    one.overwrite(options.overwrite() || (options.resume() && !one.resume()));
    run::RunConfig seeded = config;
    seeded.seed = seed;
    std::cout << "seed " << seed << " -> " << one.dir() << "\n";
    const RunResult result = run_experiment(seeded, one, raise_at);
    if (result.interrupted) {
      // (--stop-at stops the first seed that reaches it, as asked: not an interruption)
      const bool stopped_as_asked = options.stop_at() > 0 && result.steps >= options.stop_at();
      std::cout << "stopped at seed " << seed
                << (stopped_as_asked ? " (--stop-at " + std::to_string(options.stop_at()) + ")"
                                     : std::string())
                << "; continue with --resume\n";
      if (interrupted != nullptr) *interrupted = !stopped_as_asked;
      return dir;
    }
  }
  std::cout << write_summary(dir, seeds) << "summary in " << dir << "/summary.{json,csv,md}\n";
  return dir;
}

std::string compare_runs(const std::string& a, const std::string& b,
                         std::vector<std::string> metrics) {
  const auto files_a = results_files(a), files_b = results_files(b);
  auto ra = by_metric(files_a, a), rb = by_metric(files_b, b);
  // Metrics of one name measure different things in different experiments (test/acc of a
  // classifier, of a few-shot learner, ...).
  const auto experiments = [](const std::vector<ResultsFile>& files) {
    std::set<std::string> names;
    for (const ResultsFile& file : files) {
      if (!file.experiment.empty()) names.insert(file.experiment);
    }
    return names;
  };
  const auto list = [](const std::set<std::string>& names) {
    std::string text;
    for (const auto& name : names) text += (text.empty() ? "'" : ", '") + name + "'";
    return text;
  };
  const auto ea = experiments(files_a), eb = experiments(files_b);
  MLO_CHECK(ea.size() <= 1 && eb.size() <= 1 && (ea.empty() || eb.empty() || ea == eb),
            "run A ('", a, "') is of experiment ", list(ea), " and run B ('", b, "') of ",
            list(eb), ": their metrics do not measure the same thing; compare runs of one "
            "experiment");
  if (metrics.empty()) {
    // A classifier's headline test metrics where a run has one, else every test metric both
    // have (a few-shot learner's mse, ...), without the per-class ones.
    for (const char* headline : {"test/balanced_acc", "test/rare3_acc", "test/acc"}) {
      if (ra.count(headline) > 0 || rb.count(headline) > 0) metrics.push_back(headline);
    }
    if (metrics.empty()) {
      for (const auto& metric : summary_order(ra, /*per_class=*/false)) {
        if (metric.rfind("test/", 0) == 0 && rb.count(metric) > 0) metrics.push_back(metric);
      }
    }
    MLO_CHECK(!metrics.empty(), "runs '", a, "' and '", b, "' have no test metric in common; "
              "name one with --metric");
  }
  std::ostringstream out;
  out << "A = " << a << "\nB = " << b << "\n";
  // Two single runs: their one value each, whatever their seeds.
  const bool single = files_a.size() == 1 && files_a[0].single && files_b.size() == 1 &&
                      files_b[0].single;
  if (single && files_a[0].seed != files_b[0].seed) {
    out << "(single runs: A of seed " << files_a[0].seed << ", B of seed " << files_b[0].seed
        << "; paired as one)\n";
    for (auto& [metric, values] : rb) {
      const double value = values.begin()->second;
      values = {{files_a[0].seed, value}};
    }
  }
  if (single) {
    out << "(one run each: no spread; mlo run --seeds gives paired statistics)\n";
  }
  for (const auto& metric : metrics) {
    const auto fa = ra.find(metric), fb = rb.find(metric);
    if (fa == ra.end() || fb == rb.end()) {
      out << "\n" << metric << ": not in both runs\n";
      continue;
    }
    const Paired p = paired(fa->second, fb->second);
    std::string unpaired;
    for (const auto& entry : fa->second) {
      if (fb->second.count(entry.first) == 0) {
        unpaired += " " + std::to_string(entry.first) + " (only in A)";
      }
    }
    for (const auto& entry : fb->second) {
      if (fa->second.count(entry.first) == 0) {
        unpaired += " " + std::to_string(entry.first) + " (only in B)";
      }
    }
    MLO_CHECK(p.summary.n > 0, metric, ": runs '", a, "' and '", b,
              "' have no seed in common; seeds:", unpaired);
    if (!unpaired.empty()) out << "\n" << metric << ": left out, unpaired:" << unpaired << "\n";
    out << "\n"
        << metric << " (paired by seed, B - A)\n\n| seed | A | B | B - A |\n"
        << "| --- | --- | --- | --- |\n";
    for (size_t i = 0; i < p.seeds.size(); ++i) {
      out << "| " << p.seeds[i] << " | " << fixed(p.a[i]) << " | " << fixed(p.b[i]) << " | "
          << (p.diff[i] >= 0 ? "+" : "") << fixed(p.diff[i]) << " |\n";
    }
    const Summary& s = p.summary;
    out << "\nmean difference " << (s.mean >= 0 ? "+" : "") << fixed(s.mean) << ", std "
        << fixed(s.std) << ", standard error " << fixed(s.se) << ", n " << s.n;
    if (s.se > 0) out << ", mean/se " << fixed(s.mean / s.se, 2);
    out << "\n";
  }
  return out.str();
}

}  // namespace cli
}  // namespace mlo
