#pragma once
/// \file
/// Umbrella header of the core library (mlo::core): problems, handles, the engine and its
/// schedule, the hypergradient methods, runs. The run layer (mlo::run) adds YAML experiments,
/// datasets by name: <mlo/run.h>, <mlo/data.h>. Models: <mlo/nn.h>.

#include <mlo/base/enum_names.h>
#include <mlo/base/error.h>
#include <mlo/build_config.h>
#include <mlo/core/config.h>
#include <mlo/core/engine.h>
#include <mlo/core/functional_call.h>
#include <mlo/core/graph.h>
#include <mlo/core/handle.h>
#include <mlo/core/method.h>
#include <mlo/core/path.h>
#include <mlo/core/problem.h>
#include <mlo/core/batch.h>
#include <mlo/core/schedule.h>
#include <mlo/core/stop_gradient.h>
#include <mlo/hypergrad.h>
#include <mlo/io/run.h>
