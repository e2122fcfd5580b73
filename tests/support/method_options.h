#pragma once
// The options of method `Options` that `config` carries: the selected method's when it is that
// method, else that method's defaults. For tests that build one method from a problem's config.

#include <mlo/core/config.h>

namespace mlo {
namespace test {

template <typename Options>
Options options_of(const ProblemConfig& config) {
  const Options* selected = config.method_as<Options>();
  return selected ? *selected : Options();
}

}  // namespace test
}  // namespace mlo
