#pragma once
/// \file
/// `visit_choice`: a plug-in chosen by name in a configuration (a problem's hypergradient
/// method, a model, a weighting scheme), with its own keys. Those three choices are read,
/// checked and written this way, so each reads like the others:
///
/// ```
/// // method: neumann            (one of the registered names)
/// // neumann: {iterations: 5}   (the chosen one's keys; another method's section is read and
/// //                              validated, and configures nothing)
/// mlo::visit_choice(f, "method", options, mlo::method_names(), mlo::method_options,
///                   mlo::ChoiceKeys::kOwnSection);
/// ```

#include <mlo/base/error.h>
#include <mlo/base/fields.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace mlo {

/// Where the chosen plug-in's keys are.
enum class ChoiceKeys {
  /// In a section named after it (`method: cg` then `cg: {...}`); the section of every other
  /// registered name is an alternative (`Fields::alternative`: read and validated, not kept).
  kOwnSection,
  /// Beside the name, in the same mapping (`model: {name: mlp, hidden: 64}`).
  kBeside,
};

/// Describes the choice `key` among `names` and the chosen plug-in's keys. `selected` is the
/// current choice (its `name()` is the key's value) and, after a read, the chosen one: a name
/// other than `selected->name()` replaces it by `make(name)` (that plug-in's defaults) before
/// its keys are read. `selected`'s own name is valid even when it is not among `names` (a
/// plug-in set in code, not registered). `Options` has `name()` and `visit(Fields&)`; `make` is
/// callable as `std::shared_ptr<Options>(const std::string&)`.
template <typename Options, typename Make>
void visit_choice(Fields& f, const char* key, std::shared_ptr<Options>& selected,
                  const std::vector<std::string>& names, const Make& make, ChoiceKeys keys) {
  std::string name = selected->name();
  std::vector<std::string> choices = names;
  if (std::find(choices.begin(), choices.end(), name) == choices.end()) choices.push_back(name);
  f(key, name, one_of(choices));
  if (name != selected->name()) {
    selected = make(name);
    MLO_CHECK(selected, key, ": the plug-in '", name,
              "' has no defaults (its factory returned null)");
  }
  if (keys == ChoiceKeys::kBeside) {
    selected->visit(f);
    return;
  }
  f.section(name.c_str(), [&](Fields& s) { selected->visit(s); });
  for (const auto& other : names) {
    if (other == name) continue;
    const std::shared_ptr<Options> scratch = make(other);
    MLO_CHECK(scratch, key, ": the plug-in '", other,
              "' has no defaults (its factory returned null)");
    f.alternative(other.c_str(), [&](Fields& s) { scratch->visit(s); });
  }
}

}  // namespace mlo
