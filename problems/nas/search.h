#pragma once
/// \file
/// Differentiable architecture search (`experiment: nas`; DARTS, Liu, Simonyan and Yang, ICLR
/// 2019) as a bilevel problem:
///
///   outer (`ArchitectureSearch`, alpha [edges, operations]):
///       min_alpha  CE(held-out; w*(alpha), softmax(alpha))
///   inner (`Supernet`, w): w*(alpha) = argmin_w  CE(train; w, softmax(alpha))
///
/// with any registered hypergradient method on the inner problem (DARTS' own: `darts`). At the
/// end, the test evaluation derives the discrete cell (`derive`, problems/nas/search_space.h),
/// logs it and writes it as `architecture.yaml` in the run folder, ready for `nas_retrain`:
///
///   mlo run configs/nas_search_fmnist.yaml --out runs/nas_search
///   mlo run configs/nas_retrain_fmnist.yaml --set nas.architecture=runs/nas_search/architecture.yaml
///
/// Its metrics: the supernet's "acc" and "loss" on the held-out split (validation) or the test
/// split, and "entropy", the mean entropy of the operation weights per edge (log 6 = 1.79 at
/// the start; lower as the search decides).

#include "problems/nas/data.h"
#include "problems/nas/network.h"
#include "problems/nas/search_space.h"

#include <mlo/core/problem.h>
#include <mlo/run/experiment.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace nas {

/// `nas:` the search space's size.
struct SearchSpaceConfig {
  int64_t nodes = 3;
  int64_t cells = 2;
  int64_t channels = 8;
  /// The architecture weights start at `init_scale` * N(0, 1).
  double init_scale = 1e-3;
};

/// The architecture weights alpha, one row per edge, one column per operation.
class ArchitectureImpl : public torch::nn::Module {
 public:
  ArchitectureImpl(int64_t edges, double init_scale);
  at::Tensor alpha;
};
TORCH_MODULE(Architecture);

class ArchitectureSearch;

/// The lower level: the supernet's weights.
class Supernet : public Problem {
 public:
  using Problem::Problem;
  /// The upper problem (linked by the engine).
  Handle<ArchitectureSearch> architecture{this};
  /// Cross-entropy of the supernet mixed by softmax(alpha).
  at::Tensor training_step(const Batch& batch) override;
  /// The supernet's logits under the current alpha.
  at::Tensor logits(const at::Tensor& x) const;
};

/// The upper level: the architecture weights, judged on held-out data.
class ArchitectureSearch : public Problem {
 public:
  using Problem::Problem;
  /// The lower problem (linked by the engine).
  Handle<Supernet> supernet{this};
  /// Cross-entropy of the supernet on the held-out batch (records "entropy").
  at::Tensor training_step(const Batch& batch) override;
  /// softmax(alpha) by row.
  at::Tensor mixing() const;
  at::Tensor alpha() const { return module_as<ArchitectureImpl>()->alpha; }
  /// The mean entropy of the rows of softmax(alpha).
  double entropy() const;
};

class NasSearchExperiment : public run::Experiment {
 public:
  /// Its name in YAML: `experiment: nas`.
  static constexpr const char* kName = "nas";
  struct Settings : run::SettingsFor<Settings> {
    NasDataConfig data;
    SearchSpaceConfig nas;
    void visit(Fields& fields) override;
    run::DependencyConfig default_dependencies(const run::RunConfig& config) const override;
    std::vector<std::string> required_problems() const override { return {"inner", "outer"}; }
  };

  explicit NasSearchExperiment(const run::RunConfig& config);
  Engine& engine() override { return *engine_; }
  /// The supernet's "acc", "loss" and the weights' "entropy"; on the test split it also
  /// derives the architecture and writes it (file comment).
  Metrics evaluate(run::EvalSet set) override;
  std::vector<std::string> metric_names() const override { return {"acc", "loss", "entropy"}; }
  std::string describe() const override;
  bool synthetic() const override { return data_.synthetic; }
  /// The supernet's accuracy, and the derived cell.
  std::string report(const Metrics& test, const Metrics& valid) const override;
  /// The discrete cell the current weights give.
  Genotype derived() const;

 private:
  run::RunConfig config_;
  Settings settings_;
  NasData data_;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::shared_ptr<Supernet> inner_;
  std::shared_ptr<ArchitectureSearch> outer_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace nas
}  // namespace problems
}  // namespace mlo
