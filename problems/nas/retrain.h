#pragma once
/// \file
/// Retraining a discrete architecture from scratch (`experiment: nas_retrain`): one problem,
/// "net", a `FixedNetwork` of the genotype that `nas.architecture` names, trained on the
/// training half of the data, validated on the held-out half, tested on the test split:
///
///   nas.architecture: runs/nas_search/architecture.yaml   # a derived (or hand-written) cell
///   nas.architecture: random      # a cell drawn uniformly from the space (nas.random_seed)
///   nas.architecture: hand        # a fixed cell of convolutions and skips
///
/// the last two are the baselines of architecture search; `nas.nodes`, `nas.cells` and
/// `nas.channels` size them (a file carries its own).

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

/// `nas:` which architecture.
struct RetrainConfig {
  std::string architecture = "hand";  ///< a genotype file, "random" or "hand"
  int64_t random_seed = -1;           ///< "random": the draw's seed; -1: the run's seed
  int64_t nodes = 3;                  ///< "random", "hand": the space's size
  int64_t cells = 2;
  int64_t channels = 8;
};

/// The network being retrained.
class Retrained : public Problem {
 public:
  /// `genotype`: its cell as `to_yaml` writes it, saved with the problem's state; a resume
  /// with another cell is refused.
  Retrained(std::string name, ProblemConfig config, std::string genotype);
  at::Tensor training_step(const Batch& batch) override;
  at::Tensor logits(const at::Tensor& x) const;

 protected:
  void save_step_state(torch::serialize::OutputArchive& archive) const override;
  void load_step_state(torch::serialize::InputArchive& archive) override;

 private:
  std::string genotype_;
};

class NasRetrainExperiment : public run::Experiment {
 public:
  /// Its name in YAML: `experiment: nas_retrain`.
  static constexpr const char* kName = "nas_retrain";
  struct Settings : run::SettingsFor<Settings> {
    NasDataConfig data;
    RetrainConfig nas;
    void visit(Fields& fields) override;
    /// One problem, no edges (the default graph).
    std::vector<std::string> required_problems() const override { return {"net"}; }
  };

  explicit NasRetrainExperiment(const run::RunConfig& config);
  Engine& engine() override { return *engine_; }
  /// "acc" and "loss" on the held-out split (validation) or the test split.
  Metrics evaluate(run::EvalSet set) override;
  std::vector<std::string> metric_names() const override { return {"acc", "loss"}; }
  std::string describe() const override;
  bool synthetic() const override { return data_.synthetic; }
  /// The genotype retrained.
  const Genotype& genotype() const { return genotype_; }

 private:
  run::RunConfig config_;
  Settings settings_;
  NasData data_;
  Genotype genotype_;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::shared_ptr<Retrained> net_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace nas
}  // namespace problems
}  // namespace mlo
