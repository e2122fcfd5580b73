// visit_choice: a name read from a configuration selects that plug-in's defaults before its keys
// are read; the other plug-ins' sections are read as alternatives (validated, not kept); a name
// that is neither registered nor the current plug-in's own fails its check. Read through a small
// reader of dotted keys, so the test depends on the helper only.
#include <mlo/base/choice.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace choice_test {

namespace {

// A plug-in with one key, `k`, that must be >= 0; `kind` names it.
struct Plugin {
  std::string kind;
  int64_t k = 0;
  std::string name() const { return kind; }
  void visit(mlo::Fields& f) { f("k", k, mlo::at_least(0)); }
};

std::shared_ptr<Plugin> make(const std::string& name) {
  auto plugin = std::make_shared<Plugin>();
  plugin->kind = name;
  plugin->k = name == "a" ? 1 : 2;  // each plug-in's own default
  return plugin;
}

using Values = std::map<std::string, std::string>;

// Reads dotted keys from `values`; a failed check throws "path: what"; records the paths of
// alternative sections.
class MapReader : public mlo::Fields {
 public:
  explicit MapReader(Values values, std::string prefix = "")
      : values_(std::move(values)), prefix_(std::move(prefix)) {}
  std::vector<std::string> alternatives;

  void operator()(const char* key, int64_t& value, const mlo::Check<int64_t>& check) override {
    const auto found = values_.find(prefix_ + key);
    if (found != values_.end()) value = std::stoll(found->second);
    if (check && !check(value).empty())
      throw std::runtime_error(prefix_ + key + ": " + check(value));
  }
  void operator()(const char* key, std::string& value,
                  const mlo::Check<std::string>& check) override {
    const auto found = values_.find(prefix_ + key);
    if (found != values_.end()) value = found->second;
    if (check && !check(value).empty())
      throw std::runtime_error(prefix_ + key + ": " + check(value));
  }
  void operator()(const char*, double&, const mlo::Check<double>&) override {}
  void operator()(const char*, bool&) override {}
  void operator()(const char*, std::vector<int64_t>&) override {}
  void operator()(const char*, std::map<std::string, std::vector<std::string>>&) override {}
  void section(const char* key, const std::function<void(mlo::Fields&)>& body) override {
    MapReader inner(values_, prefix_ + key + ".");
    body(inner);
    for (const auto& path : inner.alternatives) alternatives.push_back(path);
  }
  void alternative(const char* key, const std::function<void(mlo::Fields&)>& body) override {
    alternatives.push_back(prefix_ + key);
    section(key, body);
  }
  void entries(const char*, const std::vector<std::string>&,
               const std::function<void(const std::string&, mlo::Fields&)>&) override {}

 private:
  Values values_;
  std::string prefix_;
};

const std::vector<std::string> kNames = {"a", "b", "c"};

}  // namespace

TEST_CASE("visit_choice: a chosen name brings that plug-in's defaults, then its own section",
          "[base]") {
  auto selected = make("a");
  MapReader reader(Values{{"method", "b"}, {"a.k", "5"}});
  mlo::visit_choice(reader, "method", selected, kNames, make, mlo::ChoiceKeys::kOwnSection);
  CHECK(selected->name() == "b");
  CHECK(selected->k == 2);  // b's default; a's section configures nothing
  CHECK(reader.alternatives == std::vector<std::string>{"a", "c"});

  MapReader set(Values{{"method", "c"}, {"c.k", "7"}});
  mlo::visit_choice(set, "method", selected, kNames, make, mlo::ChoiceKeys::kOwnSection);
  CHECK(selected->name() == "c");
  CHECK(selected->k == 7);

  // The same name keeps the current values (set in code) under the keys the file leaves out.
  selected->k = 9;
  MapReader same(Values{{"method", "c"}});
  mlo::visit_choice(same, "method", selected, kNames, make, mlo::ChoiceKeys::kOwnSection);
  CHECK(selected->k == 9);
}

TEST_CASE("visit_choice: another plug-in's section is validated; unknown names fail", "[base]") {
  auto selected = make("a");
  MapReader bad_alternative(Values{{"method", "a"}, {"b.k", "-1"}});
  CHECK_THROWS_WITH(mlo::visit_choice(bad_alternative, "method", selected, kNames, make,
                                      mlo::ChoiceKeys::kOwnSection),
                    Catch::Matchers::StartsWith("b.k:"));

  MapReader unknown(Values{{"method", "z"}});
  CHECK_THROWS_WITH(
      mlo::visit_choice(unknown, "method", selected, kNames, make, mlo::ChoiceKeys::kOwnSection),
      Catch::Matchers::StartsWith("method:"));
  CHECK(selected->name() == "a");

  // A plug-in set in code under a name nobody registered is valid as it is.
  auto own = make("mine");
  MapReader kept(Values{{"method", "mine"}, {"mine.k", "4"}});
  mlo::visit_choice(kept, "method", own, kNames, make, mlo::ChoiceKeys::kOwnSection);
  CHECK(own->name() == "mine");
  CHECK(own->k == 4);
}

TEST_CASE("visit_choice: keys beside the name are the chosen plug-in's", "[base]") {
  auto selected = make("a");
  MapReader reader(Values{{"name", "b"}, {"k", "3"}});
  mlo::visit_choice(reader, "name", selected, kNames, make, mlo::ChoiceKeys::kBeside);
  CHECK(selected->name() == "b");
  CHECK(selected->k == 3);
  CHECK(reader.alternatives.empty());
}

}  // namespace choice_test
