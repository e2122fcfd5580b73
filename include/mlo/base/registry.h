#pragma once
/// \file
/// `mlo::Registry<Entry>`: plug-ins by name, one pattern for every kind (hypergradient methods,
/// models, datasets, experiments, weighting schemes). A plug-in is registered under a name with
/// the type that defines it (its options type, or its class) and an entry (what builds it); the
/// registry keeps one entry per name, with one rule for every kind:
///
/// - the same type registered again under its name is a no-op (a header with a registration
///   included by two files, a library loaded twice);
/// - another type under a taken name is an error naming both places: two plug-ins under one name
///   would make configs ambiguous.
///
/// Looking up a name that is not registered is an error listing the registered names.

#include <mlo/base/error.h>

#include <functional>
#include <map>
#include <string>
#include <typeindex>
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
  /// name or another type under a taken name.
  bool add(const std::string& name, std::type_index type, Entry entry, std::string where) {
    MLO_CHECK(!name.empty(), "a ", what_, " needs a name (", where, ")");
    const auto found = items_.find(name);
    if (found != items_.end()) {
      MLO_CHECK(found->second.type == type, "the ", what_, " '", name, "' is registered twice, ",
                "by two different types (", found->second.where, " and ", where,
                "); give one of them another name");
      return true;
    }
    items_.emplace(name, Item{type, std::move(entry), std::move(where)});
    return true;
  }

  /// Whether `name` is registered.
  bool contains(const std::string& name) const { return items_.count(name) > 0; }
  /// The entry of `name`; throws `mlo::Error` listing the registered names for an unknown one.
  const Entry& at(const std::string& name) const {
    const auto found = items_.find(name);
    if (found == items_.end()) {
      std::string names;
      for (const auto& item : items_) names += (names.empty() ? "" : ", ") + item.first;
      throw Error("unknown " + what_ + " '" + name + "'; registered: " +
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
    std::type_index type;
    Entry entry;
    std::string where;
  };
  std::string what_;
  std::string hint_;
  std::map<std::string, Item> items_;
};

/// "file:line" of a registration, for messages.
inline std::string registered_at(const char* file, int line) {
  return std::string(file ? file : "?") + ":" + std::to_string(line);
}

}  // namespace mlo
