#include <mlo/core/metrics.h>

#include <cctype>
#include <cstdio>
#include <sstream>
#include <utility>

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

namespace {

// `line` cut at runs of spaces of at least `min_run` characters: (the run before, the text).
std::vector<std::pair<std::string, std::string>> pieces(const std::string& line,
                                                        std::size_t min_run) {
  std::vector<std::pair<std::string, std::string>> out{{"", ""}};
  for (std::size_t i = 0; i < line.size();) {
    std::size_t run = 0;
    while (i + run < line.size() && line[i + run] == ' ') ++run;
    if (run >= min_run && !out.back().second.empty()) {
      out.emplace_back(line.substr(i, run), "");
    } else {
      out.back().second += line.substr(i, run);
    }
    i += run;
    if (i < line.size()) out.back().second += line[i++];
  }
  return out;
}

}  // namespace

std::vector<std::string> console_lines(const std::string& text, std::size_t width) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() <= width) {
      out.push_back(line);
      continue;
    }
    // Break between "name value" pairs (two spaces) where the line has them; a piece still too
    // long, and a line of single spaces, break between words.
    const bool pairs = line.find("  ") != std::string::npos;
    std::vector<std::pair<std::string, std::string>> parts;
    for (auto& piece : pieces(line, pairs ? 2 : 1)) {
      if (piece.second.size() + 2 <= width) {
        parts.push_back(std::move(piece));
        continue;
      }
      auto words = pieces(piece.second, 1);
      words.front().first = piece.first;
      parts.insert(parts.end(), words.begin(), words.end());
    }
    std::string current;
    for (const auto& [gap, word] : parts) {
      if (word.empty()) continue;  // trailing spaces
      if (current.empty()) {
        current = word;
      } else if (current.size() + gap.size() + word.size() <= width) {
        current += gap + word;
      } else {
        out.push_back(current);
        // Indented where the indent fits: a word as long as the width starts at column 0.
        current = (word.size() + 2 <= width ? "  " : "") + word;
      }
    }
    out.push_back(current);
  }
  return out;
}

}  // namespace mlo
