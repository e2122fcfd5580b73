#include <mlo/core/config.h>

namespace mlo {

ProblemConfig& ProblemConfig::method(const std::string& name) {
  method_ = method_options(name);
  return *this;
}

const MethodOptions& ProblemConfig::method() const {
  // NOTE: looked up on use, not at construction: a config may be built during static
  // initialization, before the built-in methods have registered.
  return method_ ? *method_ : registered_defaults(kDefaultMethod);
}

}  // namespace mlo
