// The `mlo` executable: the library entry point, with the ready-made experiments of libmlo
// (reweighting, hpo).
#include <mlo/cli/main.h>

int main(int argc, char** argv) { return mlo::cli::main(argc, argv); }
