#pragma once
/// \file
/// Who this process is in a launch, read from the variables of the launcher that started it,
/// and where the rendezvous store is.
///
/// Order of precedence (the first that applies wins):
///  1. `RANK` and `WORLD_SIZE` set (torchrun, `mlo launch`, or by hand): `RANK`, `WORLD_SIZE`,
///     `LOCAL_RANK` (default: `RANK`), `GROUP_RANK` (the node; default 0), `MASTER_ADDR`,
///     `MASTER_PORT`; under torchrun also `TORCHELASTIC_USE_AGENT_STORE` and
///     `TORCHELASTIC_RESTART_COUNT`, under `mlo launch` `MLO_RESTART_COUNT`.
///  2. `SLURM_PROCID` and `SLURM_NTASKS` set (a task of Slurm's `srun`): rank `SLURM_PROCID`,
///     world size `SLURM_STEP_NUM_TASKS` (the srun step's) or else `SLURM_NTASKS`, local rank
///     `SLURM_LOCALID`, node `SLURM_NODEID`; `MASTER_ADDR` when set, else the first host of
///     `SLURM_STEP_NODELIST` or else `SLURM_JOB_NODELIST` (Slurm's compressed form,
///     `node[01-04,07]`, expanded); `MASTER_PORT` when set, else `kSlurmPortBase +
///     (SLURM_JOB_ID + 1000 * SLURM_STEP_ID) % kSlurmPortSpan` (the same on every task of a step).
///     A batch script's own process sees these variables too: under strategy `default` a
///     launch read from Slurm's variables runs as one process (`from_scheduler`).
///  3. Neither: one process.
/// A malformed or inconsistent value throws `mlo::Error` naming the variable and the value.

#include <string>
#include <vector>

namespace mlo {
namespace dist {

/// Under Slurm without MASTER_PORT, the store's port is `kSlurmPortBase + (SLURM_JOB_ID + 1000 *
/// SLURM_STEP_ID) % kSlurmPortSpan`: below Linux's ephemeral ports (32768 and up), so no
/// outgoing connection holds it.
inline constexpr int kSlurmPortBase = 20000;
/// The number of ports the Slurm default draws from (see `kSlurmPortBase`).
inline constexpr int kSlurmPortSpan = 10000;

/// Who this process is and where the rendezvous store listens.
struct Rendezvous {
  /// This process's rank, 0 .. `world_size` - 1.
  int rank = 0;
  /// The number of processes.
  int world_size = 1;
  /// This process's rank on its machine. Under a launcher, a run on `device: cuda` takes GPU
  /// `local_rank`.
  int local_rank = 0;
  /// This process's machine (node), 0 .. nodes - 1.
  int node_rank = 0;
  /// Host of the rendezvous store: rank 0's machine.
  std::string master_addr = "127.0.0.1";
  /// Port of the rendezvous store.
  int master_port = 29500;
  /// Whether the launcher's agent already serves a store on `master_port` for its workers
  /// (torchrun's `TORCHELASTIC_USE_AGENT_STORE=True`).
  bool agent_store = false;
  /// How many times the launcher restarted the workers before this attempt (0: the first run).
  int restart_count = 0;
  /// Whether the launch was read from a scheduler's variables (Slurm's), which a process of the
  /// job's allocation sees whether or not it is one of several ranks: under strategy `default`
  /// such a process runs alone, where RANK/WORLD_SIZE with a world size above 1 are refused.
  bool from_scheduler = false;
  /// The launcher, in words, for the log: "torchrun", "mlo launch", "Slurm (srun)",
  /// "RANK/WORLD_SIZE", or "one process".
  std::string launcher = "one process";

  /// Reads the variables above from the environment.
  static Rendezvous from_env();

  /// The port on which rank 0 serves mlo's own rendezvous store, or -1 when every rank joins
  /// the launcher's store on `master_port` instead. With no agent store: `master_port`. With
  /// torchrun's agent store: -1 where this LibTorch can be the agent's client (2.x, the
  /// torchrun users have); in the 1.13 lane, whose store client does not speak the protocol of
  /// a 2.x agent's store, `master_port + 1`, or `MLO_STORE_PORT` when set.
  int own_store_port() const;
};

/// The hosts of a Slurm host list (`SLURM_JOB_NODELIST`): "a[01-03,7],b" gives a01, a02, a03,
/// a7 and b; several bracket groups in one name expand as a product, zero padding as written.
/// Throws `mlo::Error` naming `variable` and the value when it is malformed or names no host.
std::vector<std::string> expand_host_list(const std::string& list,
                                          const std::string& variable = "SLURM_JOB_NODELIST");

}  // namespace dist
}  // namespace mlo
