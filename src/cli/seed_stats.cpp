#include "seed_stats.h"

#include <mlo/run/config.h>

#include <mlo/base/error.h>

#include <cmath>
#include <set>
#include <sstream>

namespace mlo {
namespace cli {
namespace {

int64_t parse_int(const std::string& text, const std::string& spec) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MLO_CHECK(!text.empty() && used == text.size() && value >= 0, "--seeds '", spec, "': '", text,
            "' is not a non-negative integer");
  return value;
}

}  // namespace

namespace {
constexpr int64_t kMaxSeeds = 1000;
}  // namespace

std::vector<int64_t> parse_seeds(const std::string& spec) {
  std::vector<int64_t> seeds;
  std::set<int64_t> seen;
  std::stringstream parts(spec);
  std::string part;
  while (std::getline(parts, part, ',')) {
    const auto dash = part.find('-');
    int64_t first = 0, last = 0;
    if (dash == std::string::npos) {
      first = last = parse_int(part, spec);
    } else {
      first = parse_int(part.substr(0, dash), spec);
      last = parse_int(part.substr(dash + 1), spec);
      MLO_CHECK(first <= last, "--seeds '", spec, "': range '", part, "' is descending");
    }
    for (const int64_t s : {first, last}) {
      const std::string why = run::seed_error(s);
      MLO_CHECK(why.empty(), "--seeds '", spec, "': seed ", s, " ", why);
    }
    // (one run each: a range past this is a typo, not a study)
    MLO_CHECK(last - first < kMaxSeeds && static_cast<int64_t>(seeds.size()) + (last - first) <
                                               kMaxSeeds,
              "--seeds '", spec, "' names more than ", kMaxSeeds, " seeds (one run each)");
    for (int64_t s = first; s <= last; ++s) {
      MLO_CHECK(seen.insert(s).second, "--seeds '", spec, "': seed ", s, " appears twice");
      seeds.push_back(s);
    }
  }
  MLO_CHECK(!seeds.empty(), "--seeds '", spec, "' names no seed (e.g. 0-4 or 1,3,5)");
  return seeds;
}

Summary summarize(const std::vector<double>& values) {
  Summary out;
  out.n = static_cast<int64_t>(values.size());
  if (values.empty()) return out;
  double sum = 0;
  for (double v : values) sum += v;
  out.mean = sum / static_cast<double>(out.n);
  if (out.n > 1) {
    double squares = 0;
    for (double v : values) squares += (v - out.mean) * (v - out.mean);
    out.std = std::sqrt(squares / static_cast<double>(out.n - 1));
    out.se = out.std / std::sqrt(static_cast<double>(out.n));
  }
  return out;
}

Paired paired(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  Paired out;
  for (const auto& [seed, value] : a) {
    const auto found = b.find(seed);
    if (found == b.end()) continue;
    out.seeds.push_back(seed);
    out.a.push_back(value);
    out.b.push_back(found->second);
    out.diff.push_back(found->second - value);
  }
  out.summary = summarize(out.diff);
  return out;
}

}  // namespace cli
}  // namespace mlo
