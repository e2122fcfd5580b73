#pragma once
/// \file
/// Umbrella header: everything a user of mlo needs.

#include <mlo/base/enum_names.h>
#include <mlo/base/error.h>
#include <mlo/build_config.h>
#include <mlo/core/config.h>
#include <mlo/core/engine.h>
#include <mlo/core/graph.h>
#include <mlo/core/method.h>
#include <mlo/core/path.h>
#include <mlo/core/problem.h>
#include <mlo/data/batch.h>
#include <mlo/hypergrad.h>
