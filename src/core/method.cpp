#include <mlo/core/method.h>

#include <mlo/base/error.h>

#include <c10/util/StringUtil.h>

#include <map>
#include <typeinfo>
#include <utility>

namespace mlo {
namespace {

using Defaults = std::function<std::shared_ptr<MethodOptions>()>;

struct Entry {
  Defaults factory;
  // Made once at registration and never replaced: `registered_defaults` hands out references.
  std::shared_ptr<const MethodOptions> defaults;
};

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find the map constructed whatever the initialization order.
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> methods;
  return methods;
}

const Entry& entry(const std::string& name) {
  const auto found = registry().find(name);
  MLO_CHECK(found != registry().end(), "unknown hypergradient method '", name,
            "'; registered methods: ", c10::Join(", ", method_names()),
            " (a method of your own registers with MLO_REGISTER_METHOD, docs/hypergradients.md)");
  return found->second;
}

std::shared_ptr<MethodOptions> make_defaults(const std::string& name, const Defaults& factory) {
  auto options = factory();
  MLO_CHECK(options && options->name() == name, "hypergradient method '", name,
            "': its registered factory returned ",
            options ? "options named '" + options->name() + "'" : std::string("null"));
  return options;
}

}  // namespace

bool register_method(const std::string& name, Defaults defaults) {
  MLO_CHECK(!name.empty(), "register_method: a hypergradient method needs a name");
  MLO_CHECK(defaults, "register_method: empty factory for hypergradient method '", name, "'");
  std::shared_ptr<const MethodOptions> instance = make_defaults(name, defaults);
  const auto found = registry().find(name);
  if (found != registry().end()) {
    const MethodOptions& held = *found->second.defaults;
    const MethodOptions& offered = *instance;
    MLO_CHECK(typeid(held) == typeid(offered), "hypergradient method '", name,
              "' is registered twice, by two different options types; give one another name");
    return true;
  }
  registry().emplace(name, Entry{std::move(defaults), std::move(instance)});
  return true;
}

void check_options(const MethodOptions& options) {
  const auto copy = options.clone();
  const std::string failed = first_failed_check([&](Fields& f) { copy->visit(f); });
  MLO_CHECK(failed.empty(), options.name(), ".", failed);
  if (const auto broken = options.validate()) {
    throw Error(options.name() + "." + broken->key + ": " + broken->what);
  }
}

std::shared_ptr<MethodOptions> method_options(const std::string& name) {
  return make_defaults(name, entry(name).factory);
}

const MethodOptions& registered_defaults(const std::string& name) {
  return *entry(name).defaults;
}

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace mlo
