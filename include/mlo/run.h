#pragma once
/// \file
/// Umbrella header of the run area (library mlo::run): experiments launched from YAML, their
/// configuration, the registry by name, the builders from configuration to problems, and where
/// a run's process and data go (device, launch shard).

#include <mlo/run/builders.h>
#include <mlo/run/config.h>
#include <mlo/run/device.h>
#include <mlo/run/experiment.h>
#include <mlo/run/sharding.h>
#include <mlo/run/yaml.h>
