// A hypergradient method of your own (fixed_point.h), chosen from YAML with the whole `mlo`
// command line: this program is `mlo` plus the method.
//
//   ./fixed_point_method run examples/fixed_point_method/hpo_fixed_point.yaml
//   ./fixed_point_method run configs/hpo_logreg.yaml --set problems.inner.method=fixed_point
#include "fixed_point.h"

#include <mlo/cli/main.h>

int main(int argc, char** argv) { return mlo::cli::main(argc, argv); }
