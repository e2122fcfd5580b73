#pragma once
/// \file
/// Umbrella header of the hypergrad area: the built-in methods (DARTS, Neumann series, conjugate
/// gradient, SAMA, unrolled differentiation in reverse and in forward mode), the vector helpers
/// and finite differences they are built from, the forward-mode products, the differentiable
/// optimizer updates and the binomial checkpointing schedule.
/// The interface and the registry by name are core's (mlo/core/method.h).

#include <mlo/hypergrad/binomial_schedule.h>
#include <mlo/hypergrad/cg.h>
#include <mlo/hypergrad/darts.h>
#include <mlo/hypergrad/differentiable_optimizer.h>
#include <mlo/hypergrad/finite_difference.h>
#include <mlo/hypergrad/forward_mode.h>
#include <mlo/hypergrad/forward_unrolled.h>
#include <mlo/hypergrad/neumann.h>
#include <mlo/hypergrad/sama.h>
#include <mlo/hypergrad/unrolled.h>
#include <mlo/hypergrad/vector.h>
