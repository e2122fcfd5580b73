#include <mlo/run/sharding.h>

#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>

namespace mlo {
namespace run {

data::Shard launch_shard(const RunConfig& config) {
  const dist::Rendezvous where = dist::Rendezvous::from_env();
  if (config.engine.strategy == dist::Strategy::kDefault) {
    MLO_CHECK(where.world_size == 1, "WORLD_SIZE=", where.world_size,
              " but engine.strategy is default (", config.where("engine.strategy"),
              "); set engine.strategy to distributed, zero1 or zero2 (e.g. --set "
              "engine.strategy=distributed), or run one process");
    return data::Shard{};
  }
  return data::Shard{where.rank, where.world_size};
}

data::Shard data_shard(const RunConfig& config, const std::string& problem) {
  const data::Shard launch = launch_shard(config);
  const auto found = config.problems.find(problem);
  const bool parallel = found == config.problems.end() || found->second.data_parallel;
  return parallel ? launch : data::Shard{};
}

bool is_main_process(const RunConfig& config) { return launch_shard(config).rank == 0; }

}  // namespace run
}  // namespace mlo
