#include "problems/reweighting/scheme.h"

#include <mlo/base/choice.h>
#include <mlo/base/error.h>

#include <utility>

namespace mlo {
namespace problems {
namespace reweighting {
namespace {

using Defaults = std::function<std::shared_ptr<Scheme>()>;

// NOTE: a function-local static, so registrations from other translation units' static
// initializers find it constructed whatever the initialization order.
Registry<Defaults>& registry() {
  static Registry<Defaults> schemes(
      "weighting scheme", "a program registers its own with MLO_REGISTER_WEIGHTING");
  return schemes;
}

}  // namespace

std::shared_ptr<torch::nn::Module> Scheme::weight_net_module(
    const nn::ModelConfig& model, const std::vector<int64_t>& train_counts) const {
  (void)train_counts;
  return model.make(nn::ModelInput{});
}

bool register_scheme(const std::string& name, std::type_index type, Defaults defaults,
                     const std::string& where) {
  MLO_CHECK(defaults, "register_scheme: the weighting scheme '", name, "' needs its defaults");
  return registry().add(name, type, std::move(defaults), where);
}

std::vector<std::string> scheme_names() { return registry().names(); }

std::shared_ptr<Scheme> make_scheme(const std::string& name) {
  auto scheme = registry().at(name)();
  MLO_CHECK(scheme && scheme->name() == name, "weighting scheme '", name,
            "': its registered defaults are ",
            scheme ? "named '" + scheme->name() + "'" : std::string("null"));
  return scheme;
}

SchemeConfig::SchemeConfig(const std::string& name) : scheme_(make_scheme(name)) {}

SchemeConfig::SchemeConfig(const SchemeConfig& other) : scheme_(other.scheme_->clone()) {}

SchemeConfig& SchemeConfig::operator=(const SchemeConfig& other) {
  if (this != &other) scheme_ = other.scheme_->clone();
  return *this;
}

void SchemeConfig::visit(Fields& f) {
  visit_choice(f, "method", scheme_, scheme_names(), make_scheme, ChoiceKeys::kOwnSection);
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
