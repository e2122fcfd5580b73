#include <mlo/core/metrics.h>

#include <cctype>
#include <cstdio>

namespace mlo {

std::string metric_segment(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool kept = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                      c == '.' || c == '=' || c == '+';
    if (!kept) c = '_';
  }
  return out;
}

bool is_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isspace(u) || std::iscntrl(u) || c == ',' || c == '"') return false;
  }
  return true;
}

std::string format_metric(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

std::string format_headline(const Metrics& metrics, const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) {
    const auto found = metrics.find(name);
    if (found == metrics.end()) continue;
    out += (out.empty() ? "" : "  ") + name + " " + format_metric(found->second);
  }
  return out;
}

std::string format_all(const Metrics& metrics) {
  std::string out;
  for (const auto& [name, value] : metrics) {
    out += (out.empty() ? "" : "  ") + name + " " + format_metric(value);
  }
  return out;
}

}  // namespace mlo
