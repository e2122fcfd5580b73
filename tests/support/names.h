#pragma once
// Test helper: an error message matched by what it names (the problem, the key, the value, the
// remedy's setting), not by its wording, so that rewording a message breaks no test:
//
//   REQUIRE_THROWS_WITH(engine.initialize(), mlo_test::Names({"'inner'", "cg.iterations", "0"}));

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

namespace mlo_test {

/// Matches a message that contains each of `names`.
class NamesMatcher : public Catch::MatcherBase<std::string> {
 public:
  explicit NamesMatcher(std::vector<std::string> names) : names_(std::move(names)) {}
  bool match(const std::string& message) const override {
    for (const auto& name : names_) {
      if (message.find(name) == std::string::npos) return false;
    }
    return true;
  }
  std::string describe() const override {
    std::string out = "names";
    for (const auto& name : names_) out += " \"" + name + "\"";
    return out;
  }

 private:
  std::vector<std::string> names_;
};

/// A message that names each of `names` (see the file comment).
inline NamesMatcher Names(std::vector<std::string> names) { return NamesMatcher(std::move(names)); }

}  // namespace mlo_test
