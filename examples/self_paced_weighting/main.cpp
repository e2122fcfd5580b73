// A weighting scheme of your own (self_paced.h), chosen from YAML with the whole `mlo` command
// line: this program is `mlo` plus the scheme.
//
//   ./self_paced_weighting run examples/self_paced_weighting/reweight_self_paced.yaml
#include "self_paced.h"

#include <mlo/cli/main.h>

int main(int argc, char** argv) { return mlo::cli::main(argc, argv); }
