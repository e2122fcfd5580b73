#pragma once
/// \file
/// `mlo::Registry<Entry>`: plug-ins by name, one pattern for every kind (hypergradient methods,
/// models, datasets, experiments, weighting schemes). A plug-in is registered under a name with
/// the type that defines it (its options type, or its class) and an entry (what builds it); the
/// registry keeps one entry per name, with one rule for every kind:
///
/// - the same type registered again under its name is a no-op (a header with a registration
///   included by two files, a library loaded twice);
/// - another type under a taken name makes that name an error naming both places, raised where
///   the name is used (registrations run during static initialization, before `main`, where an
///   exception would end the program without a word): two plug-ins under one name would make
///   configs ambiguous. A plug-in registered by value, without a type, is always another.
///
/// Looking up a name that is not registered is an error listing the registered names.
///
/// Every kind registers the same way: a type that carries its name (`static constexpr const
/// char* kName`) and the kind's macro, at namespace scope in a source file:
///
/// ```
/// MLO_REGISTER_METHOD(MyMethodOptions);        // problems.<p>.method: <kName>
/// MLO_REGISTER_MODEL(MyModel);                 // model: {name: <kName>, ...}
/// MLO_REGISTER_DATASET(MyDataset);             // data.dataset: <kName>
/// MLO_REGISTER_EXPERIMENT(MyExperiment);       // experiment: <kName>
/// ```
///
/// (and `MLO_REGISTER_WEIGHTING(MyScheme)` for the reweighting experiment's schemes). Each
/// macro is `MLO_REGISTRATION` around its kind's `register_..._type<T>(file, line)`.

#include <mlo/base/error.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

namespace mlo {

/// The entries of one kind of plug-in, by name (see the file comment).
template <typename Entry>
class Registry {
 public:
  /// A registry of `what`s ("hypergradient method", "model"), for messages; `hint` says how to
  /// add one ("a method of your own registers with MLO_REGISTER_METHOD").
  Registry(std::string what, std::string hint) : what_(std::move(what)), hint_(std::move(hint)) {}

  /// Registers `entry` under `name` for the plug-in type `type`, defined at `where`
  /// ("file.cpp:12"); returns true (for static registration). Throws `mlo::Error` for an empty
  /// name; another type under a taken name makes the name an error (see the file comment).
  bool add(const std::string& name, std::type_index type, Entry entry, std::string where) {
    return add_item(name, Item{type, std::move(entry), std::move(where)});
  }
  /// Registers `entry` under `name` without a type (a plug-in a program describes by value):
  /// such a registration never matches another, so a taken name is an error.
  bool add(const std::string& name, Entry entry, std::string where) {
    return add_item(name, Item{std::nullopt, std::move(entry), std::move(where)});
  }

  /// Whether `name` is registered.
  bool contains(const std::string& name) const { return items_.count(name) > 0; }
  /// The entry of `name`; throws `mlo::Error` listing the registered names for an unknown one.
  const Entry& at(const std::string& name) const {
    const auto found = items_.find(name);
    if (found != items_.end() && !found->second.conflict.empty()) {
      throw Error(found->second.conflict);
    }
    if (found == items_.end()) {
      std::string names;
      for (const auto& item : items_) names += (names.empty() ? "" : ", ") + item.first;
      throw Error("unknown " + what_ + " '" + name + "'; registered " + what_ + "s: " +
                  (names.empty() ? std::string("none") : names) +
                  (hint_.empty() ? std::string() : " (" + hint_ + ")"));
    }
    return found->second.entry;
  }
  /// The registered names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& item : items_) out.push_back(item.first);
    return out;
  }
  /// What the registry holds, for messages ("hypergradient method").
  const std::string& what() const { return what_; }

 private:
  struct Item {
    std::optional<std::type_index> type;
    Entry entry;
    std::string where;
    std::string conflict = "";  // set when another type took the name too
  };
  bool add_item(const std::string& name, Item item) {
    MLO_CHECK(!name.empty(), "a ", what_, " needs a name (", item.where, ")");
    const auto found = items_.find(name);
    if (found == items_.end()) {
      items_.emplace(name, std::move(item));
    } else if (!(found->second.type && item.type && *found->second.type == *item.type) &&
               found->second.conflict.empty()) {
      found->second.conflict = "the " + what_ + " '" + name + "' is registered twice, by two " +
                               "different " +
                               (found->second.type && item.type ? "types" : "definitions") +
                               " (" + found->second.where + " and " + item.where +
                               "); give one of them another name";
    }
    return true;
  }
  std::string what_;
  std::string hint_;
  std::map<std::string, Item> items_;
};

/// The name of type `info` as written in C++ (demangled, without "(anonymous namespace)::").
std::string type_name(const std::type_info& info);

/// "file:line" of a registration, for messages.
inline std::string registered_at(const char* file, int line) {
  return std::string(file ? file : "?") + ":" + std::to_string(line);
}

}  // namespace mlo

/// Pastes `a` and `b` into one token (the helper of `MLO_CONCAT`).
#define MLO_CONCAT_(a, b) a##b
/// Pastes `a` and `b` after expanding them (`__COUNTER__` becomes its number).
#define MLO_CONCAT(a, b) MLO_CONCAT_(a, b)
/// Evaluates `registration` (a call returning true) at load time, in a variable of its own:
/// what each kind's `MLO_REGISTER_...` macro expands to.
#define MLO_REGISTRATION(registration) \
  static const bool MLO_CONCAT(mlo_registration_, __COUNTER__) = (registration)
