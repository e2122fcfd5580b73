#include "problems/reweighting/scheme.h"

#include <mlo/base/error.h>

#include <algorithm>
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
  std::string name = scheme_->name();
  const std::vector<std::string> names = scheme_names();
  std::vector<std::string> choices = names;
  if (std::find(choices.begin(), choices.end(), name) == choices.end()) choices.push_back(name);
  f("method", name, one_of(choices));
  if (name != scheme_->name()) scheme_ = make_scheme(name);
  f.section(name.c_str(), [&](Fields& s) { scheme_->visit(s); });
  for (const auto& other : names) {
    if (other == name) continue;
    const auto scratch = make_scheme(other);
    f.alternative(other.c_str(), [&](Fields& s) { scratch->visit(s); });
  }
}

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
