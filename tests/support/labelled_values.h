#pragma once
// Test helper: the numbers a worker process printed after a label ("params 0.1 0.2 ..."), the
// way the dist tests' workers report their results.

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace mlo_test {

// The numbers after `label` on the first line of `log` that starts with it; fails the test when
// there is no such line.
inline std::vector<double> values(const std::string& log, const std::string& label) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first != label) continue;
    std::vector<double> out;
    for (double v; words >> v;) out.push_back(v);
    return out;
  }
  FAIL("no '" << label << "' line in:\n" << log);
  return {};
}

}  // namespace mlo_test
