#pragma once
/// \file
/// Umbrella header of the hypergrad area: the `Hypergradient` interface and registry, and the
/// built-in methods (DARTS, Neumann series, conjugate gradient).

#include <mlo/hypergrad/cg.h>
#include <mlo/hypergrad/darts.h>
#include <mlo/hypergrad/hypergradient.h>
#include <mlo/hypergrad/neumann.h>
