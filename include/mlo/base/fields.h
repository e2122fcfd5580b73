#pragma once
/// \file
/// `Fields`: one description of a configuration section's keys, used both to read it from
/// YAML (with validation) and to write it back (the resolved `config.yaml`). The generic keys
/// (engine, optimizers, ...) are described in run/, each method's by its options type; an
/// experiment describes its own sections and per-problem keys the same way
/// (`ExperimentSettings::visit`), so its errors read like every other one:
///
///   configs/x.yaml:12:9: problems.classifier.model.name: must be one of cnn, resnet32; got 'vgg'
///
/// ```
/// void visit(mlo::Fields& f) override {
///   f.section("data", [&](mlo::Fields& s) {
///     s("samples", samples, mlo::at_least(2));
///     s("noise", noise, mlo::non_negative());
///   });
/// }
/// ```

#include <mlo/base/enum_names.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mlo {

/// A check of one value: returns "" when it is fine, else what is wrong ("must be > 0, got -1").
template <typename T>
using Check = std::function<std::string(const T&)>;

/// `value >= low`.
Check<int64_t> at_least(int64_t low);
/// `value > 0`.
Check<double> positive();
/// `value >= 0`.
Check<double> non_negative();
/// `low <= value <= high`.
Check<double> in_range(double low, double high);
/// `value > low`.
Check<double> above(double low);
/// `low < value <= high`.
Check<double> above_up_to(double low, double high);
/// `low < value < high`.
Check<double> between(double low, double high);
/// `low <= value < high`.
Check<double> at_least_below(double low, double high);
/// `low <= value <= high`, for integers.
Check<int64_t> int_in_range(int64_t low, int64_t high);
/// One of `choices` (the message lists them).
Check<std::string> one_of(std::vector<std::string> choices);

/// A visitor over the keys of one YAML mapping. The reader fills each member from the YAML (a
/// key that is absent keeps the member's value, its default) and fails with
/// `file:line:col path.key: what` on a wrong type, a failed check or a key no visit named; the
/// writer emits every key with its value.
class Fields {
 public:
  virtual ~Fields() = default;

  /// A scalar key (or a list of integers, or a map from names to lists of names).
  virtual void operator()(const char* key, int64_t& value,
                          const Check<int64_t>& check = nullptr) = 0;
  /// A floating-point key; `check`, when given, validates the value.
  virtual void operator()(const char* key, double& value,
                          const Check<double>& check = nullptr) = 0;
  /// A boolean key.
  virtual void operator()(const char* key, bool& value) = 0;
  /// A string key; `check`, when given, validates the value (e.g. `one_of`).
  virtual void operator()(const char* key, std::string& value,
                          const Check<std::string>& check = nullptr) = 0;
  /// A list of integers.
  virtual void operator()(const char* key, std::vector<int64_t>& value) = 0;
  /// A map from names to lists of names.
  virtual void operator()(const char* key,
                          std::map<std::string, std::vector<std::string>>& value) = 0;

  /// An enum with a name table (`EnumNames<E>`, base/enum_names.h), read and written by name;
  /// an unknown name fails listing the valid ones.
  template <typename E>
  void enumeration(const char* key, E& value) {
    std::string name = mlo::detail::enum_name(value);
    (*this)(key, name, one_of(enum_names<E>()));
    value = from_string<E>(name, key);
  }

  /// A nested mapping `key: {...}`; `body` visits its keys.
  virtual void section(const char* key, const std::function<void(Fields&)>& body) = 0;

  /// A mapping the reader accepts and validates, but that configures nothing unless chosen
  /// elsewhere: the section of a hypergradient method other than the selected one (a file may
  /// keep `cg: {...}` while `method: neumann` runs). Writers, `field_values` and
  /// `first_failed_check` leave it out; the reader treats it as a `section`.
  virtual void alternative(const char* key, const std::function<void(Fields&)>& body) {
    (void)key;
    (void)body;
  }

  /// A rule across keys that `key`'s value breaks (`what`: "is set, but ... is off"): the
  /// reader fails at `key`'s location as for a failed check; writers ignore it.
  virtual void refuse(const char* key, const std::string& what) {
    (void)key;
    (void)what;
  }

  /// A mapping keyed by user names (`problems: {inner: {...}, outer: {...}}`): `body(name, f)`
  /// runs for each entry, `existing` lists the entries to write (the reader takes the YAML's).
  virtual void entries(const char* key, const std::vector<std::string>& existing,
                       const std::function<void(const std::string& name, Fields&)>& body) = 0;

  /// `entries` over a `std::map<std::string, T>`: `body(f, map[name])` for each entry.
  template <typename T, typename Body>
  void map(const char* key, std::map<std::string, T>& values, const Body& body) {
    std::vector<std::string> names;
    for (const auto& entry : values) names.push_back(entry.first);
    entries(key, names, [&](const std::string& name, Fields& f) { body(f, values[name]); });
  }
};

/// Passes what `visit` describes on to `to`, except a `method` key and the section it names:
/// writes a problem's configuration without the hypergradient method, for a problem whose
/// method nothing uses (no hypergradient path passes through it).
void visit_without_method(Fields& to, const std::function<void(Fields&)>& visit);

/// Every key a visit describes, with its value as text ("name" -> "sgd", "section.key" -> "0.1"):
/// what `visit` would write, for comparisons (is a section at its defaults?) and listings.
std::map<std::string, std::string> field_values(const std::function<void(Fields&)>& visit);

/// The keys a visit describes as YAML text (block mappings, two spaces per level, lists in flow
/// style, every value written so that a YAML reader reads it back exactly: numbers as their
/// shortest exact text with a point, strings quoted where they could read as anything else),
/// ending with a newline. What a run records as its `config.yaml`.
std::string yaml_text(const std::function<void(Fields&)>& visit);

/// The first value a visit describes whose check fails, as "key: what" ("alpha: must be > 0,
/// got -1"; nested keys joined by dots), or "" when every check passes: the YAML reader's checks
/// applied to values set in code.
std::string first_failed_check(const std::function<void(Fields&)>& visit);

}  // namespace mlo
