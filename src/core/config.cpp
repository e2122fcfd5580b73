#include <mlo/core/config.h>

namespace mlo {

ProblemConfig& ProblemConfig::method(const std::string& name) {
  method_ = method_options(name);
  return *this;
}

const MethodOptions& ProblemConfig::method() const {
  if (method_) return *method_;
  // NOTE: looked up on first use, not at construction: a config may be built during static
  // initialization, before the built-in methods have registered.
  static const std::shared_ptr<const MethodOptions> kDefault = method_options(kDefaultMethod);
  return *kDefault;
}

}  // namespace mlo
