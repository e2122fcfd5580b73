#include <mlo/core/method.h>

#include <mlo/base/error.h>

#include <c10/util/StringUtil.h>

#include <map>
#include <utility>

namespace mlo {
namespace {

using Defaults = std::function<std::shared_ptr<MethodOptions>()>;

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find the map constructed whatever the initialization order.
std::map<std::string, Defaults>& registry() {
  static std::map<std::string, Defaults> methods;
  return methods;
}

}  // namespace

bool register_method(const std::string& name, Defaults defaults) {
  MLO_CHECK(!name.empty(), "register_method: a hypergradient method needs a name");
  MLO_CHECK(defaults, "register_method: empty factory for hypergradient method '", name, "'");
  registry()[name] = std::move(defaults);
  return true;
}

std::shared_ptr<MethodOptions> method_options(const std::string& name) {
  const auto found = registry().find(name);
  MLO_CHECK(found != registry().end(), "unknown hypergradient method '", name,
            "'; registered methods: ", c10::Join(", ", method_names()),
            " (a method of your own registers with MLO_REGISTER_METHOD, docs/hypergradients.md)");
  auto options = found->second();
  MLO_CHECK(options && options->name() == name, "hypergradient method '", name,
            "': its registered factory returned ",
            options ? "options named '" + options->name() + "'" : std::string("null"));
  return options;
}

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace mlo
