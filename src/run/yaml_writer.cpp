// Writing a configuration as YAML: the schema (schema.h) drives the core's YAML writer
// (mlo::yaml_text), which emits every key with its value.
#include <mlo/run/yaml.h>

#include "schema.h"

namespace mlo {
namespace run {

std::string to_yaml(const run::RunConfig& config) {
  run::RunConfig copy = config;
  // A config built in code may have no settings yet: write the experiment's defaults.
  if (!copy.settings) copy.settings = run::SettingsHolder(run::make_settings(copy.experiment));
  return yaml_text([&](Fields& f) {
    f("experiment", copy.experiment, nullptr);
    schema::visit_after_experiment(f, copy, /*record=*/true);
  });
}

}  // namespace run
}  // namespace mlo
