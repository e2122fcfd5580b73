#pragma once
/// \file
/// Umbrella header: everything a user of mlo needs.

#include <mlo/build_config.h>
#include <mlo/core/batch.h>
#include <mlo/core/config.h>
#include <mlo/core/engine.h>
#include <mlo/core/error.h>
#include <mlo/core/graph.h>
#include <mlo/core/problem.h>
#include <mlo/hypergrad/hypergradient.h>
