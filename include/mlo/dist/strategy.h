#pragma once
/// \file
/// The names of the data-parallel choices (light: included by core/config.h): the collective
/// backend and the engine's strategy.

#include <mlo/base/enum_names.h>

#include <utility>

namespace mlo {
namespace dist {

/// The collective backend: Gloo on CPU, NCCL on CUDA (CUDA builds only).
enum class Backend { kGloo, kNccl };

/// How the engine uses the processes of a launch (`mlo launch`, torchrun).
enum class Strategy {
  kDefault,      ///< one process; no process group
  kDistributed,  ///< data parallel: batches sharded, gradients and hypergradients averaged
  kZero1,        ///< distributed, and each rank keeps and steps its shard's optimizer state
  kZero2,        ///< zero1, and gradients reduce-scattered (each rank keeps its shard's)
  kZero3,        ///< zero2, and the parameters of `nn::Chain` models sharded, gathered per block
};

}  // namespace dist

/// The names of `dist::Backend` in configs and logs: "gloo", "nccl".
template <>
struct EnumNames<dist::Backend> {
  /// What the values are, for errors ("unknown distributed backend 'x'").
  static constexpr const char* kWhat = "distributed backend";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<dist::Backend, const char*> kTable[] = {
      {dist::Backend::kGloo, "gloo"}, {dist::Backend::kNccl, "nccl"}};
};
/// The names of `dist::Strategy` in configs and logs: "default", "distributed", "zero1",
/// "zero2", "zero3".
template <>
struct EnumNames<dist::Strategy> {
  /// What the values are, for errors ("unknown strategy 'x'").
  static constexpr const char* kWhat = "strategy";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<dist::Strategy, const char*> kTable[] = {
      {dist::Strategy::kDefault, "default"},
      {dist::Strategy::kDistributed, "distributed"},
      {dist::Strategy::kZero1, "zero1"},
      {dist::Strategy::kZero2, "zero2"},
      {dist::Strategy::kZero3, "zero3"}};
};

namespace dist {
/// Name of a backend as written in configs and logs ("gloo", "nccl").
inline const char* to_string(Backend backend) { return mlo::detail::enum_name(backend); }
/// Name of a strategy as written in configs and logs ("default", "zero1", ...).
inline const char* to_string(Strategy strategy) { return mlo::detail::enum_name(strategy); }
/// Whether each rank keeps only its share of the optimizer state (zero1, zero2, zero3): a saved
/// state then holds one rank's share and resumes only on the same split.
inline bool shards_optimizer_state(Strategy strategy) {
  return strategy == Strategy::kZero1 || strategy == Strategy::kZero2 ||
         strategy == Strategy::kZero3;
}
}  // namespace dist

}  // namespace mlo
