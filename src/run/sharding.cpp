#include <mlo/run/sharding.h>

#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>

namespace mlo {
namespace run {

data::Shard launch_shard(const RunConfig& config) {
  const dist::Rendezvous where = dist::Rendezvous::from_env();
  if (config.engine.strategy() == dist::Strategy::kDefault) {
    // (a process of a Slurm allocation, srun's task or the batch script, runs alone)
    MLO_CHECK(where.world_size == 1 || where.from_scheduler, "WORLD_SIZE=", where.world_size,
              " but engine.strategy is default (", config.where("engine.strategy"),
              "); set engine.strategy to distributed, zero1, zero2 or zero3 (e.g. --set "
              "engine.strategy=distributed), or run one process");
    return data::Shard{};
  }
  return data::Shard{where.rank, where.world_size};
}

data::Shard data_shard(const RunConfig& config, const std::string& problem) {
  const data::Shard launch = launch_shard(config);
  const auto found = config.problems.find(problem);
  const bool parallel = found == config.problems.end() || found->second.config.data_parallel();
  return parallel ? launch : data::Shard{};
}

void check_world_size(const RunConfig& config, int64_t world_size) {
  if (world_size <= 1 || config.engine.strategy() == dist::Strategy::kDefault ||
      !config.settings) {
    return;
  }
  for (const auto& batch : config.settings->global_batches(config)) {
    const auto found = config.problems.find(batch.problem);
    const bool parallel = found == config.problems.end() || found->second.config.data_parallel();
    if (!parallel || batch.size % world_size == 0) continue;
    config.fail(batch.key, "the global batch of " + std::to_string(batch.size) +
                               " samples of problem '" + batch.problem +
                               "' cannot be split evenly over " + std::to_string(world_size) +
                               " ranks (each reads batch / world size); choose a multiple of " +
                               std::to_string(batch.per_key * world_size));
  }
}

bool is_main_process(const RunConfig& config) { return launch_shard(config).rank == 0; }

}  // namespace run
}  // namespace mlo
