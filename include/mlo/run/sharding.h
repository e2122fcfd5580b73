#pragma once
/// \file
/// Where an experiment's process stands in a launch (`mlo launch`, torchrun): its rank and the
/// world size from the torchrun variables, and the data shard of each of its problems. The
/// experiments build their streams before the engine joins the process group, so they read the
/// launch from the environment (`dist::Rendezvous::from_env`), as the engine will.
///
/// ```
/// const data::Shard shard = run::data_shard(config, "classifier");
/// auto options = data::LoaderOptions(d.batch_size).seed(seed).shard(shard);
/// ```

#include <mlo/data/stream.h>
#include <mlo/run/config.h>

#include <string>

namespace mlo {
namespace run {

/// This process's place in the launch: rank 0 of 1 under strategy default. Throws `mlo::Error`
/// when the environment names WORLD_SIZE > 1 but `config.engine.strategy` is default (N copies
/// of a 1-process run would each train alone and write the same output folder), or when a
/// variable is malformed.
data::Shard launch_shard(const RunConfig& config);

/// The shard of problem `problem`'s training batches: this process's place in the launch when
/// the strategy is not default and the problem is data parallel (`problems.<p>.data_parallel`),
/// else the whole batch (0 of 1). Throws as `launch_shard` does.
data::Shard data_shard(const RunConfig& config, const std::string& problem);

/// Fails with `config.fail(key, ...)` (file, line and key named) when one of the experiment's
/// global batches (`ExperimentSettings::global_batches`) that a data-parallel problem reads
/// cannot be split evenly over `world_size` ranks; nothing for one rank or strategy default.
void check_world_size(const RunConfig& config, int64_t world_size);

/// Whether this process writes the run's output (metrics, summary, config, report): rank 0.
bool is_main_process(const RunConfig& config);

}  // namespace run
}  // namespace mlo
