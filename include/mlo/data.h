#pragma once
/// \file
/// Umbrella header of the data area (library mlo::run): datasets by name (the registry, and
/// downloads), dataset readers, long-tailed split, transforms, streams.

#include <mlo/data/cifar10.h>
#include <mlo/data/download.h>
#include <mlo/data/fashion_mnist.h>
#include <mlo/data/label_noise.h>
#include <mlo/data/long_tail.h>
#include <mlo/data/registry.h>
#include <mlo/data/sampler.h>
#include <mlo/data/split.h>
#include <mlo/data/stream.h>
#include <mlo/data/subset.h>
#include <mlo/data/synthetic.h>
#include <mlo/data/transforms.h>
