#include <mlo/core/method.h>

#include <mlo/base/error.h>

#include <c10/util/StringUtil.h>

#include <mlo/base/registry.h>

#include <typeindex>
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
// initializers find it constructed whatever the initialization order.
Registry<Entry>& registry() {
  static Registry<Entry> methods(
      "hypergradient method",
      "a method of your own registers with MLO_REGISTER_METHOD, docs/hypergradients.md");
  return methods;
}

std::shared_ptr<MethodOptions> make_defaults(const std::string& name, const Defaults& factory) {
  auto options = factory();
  MLO_CHECK(options && options->name() == name, "hypergradient method '", name,
            "': its registered factory returned ",
            options ? "options named '" + options->name() + "'" : std::string("null"));
  return options;
}

}  // namespace

bool register_method(const std::string& name, Defaults defaults, const std::string& where) {
  MLO_CHECK(defaults, "register_method: empty factory for hypergradient method '", name, "'");
  std::shared_ptr<const MethodOptions> instance = make_defaults(name, defaults);
  const MethodOptions& options = *instance;
  return registry().add(name, std::type_index(typeid(options)),
                        Entry{std::move(defaults), std::move(instance)},
                        (where.empty() ? std::string() : where + ", ") + "registered by " +
                            type_name(typeid(options)));
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
  return make_defaults(name, registry().at(name).factory);
}

const MethodOptions& registered_defaults(const std::string& name) {
  return *registry().at(name).defaults;
}

std::vector<std::string> method_names() { return registry().names(); }

}  // namespace mlo
