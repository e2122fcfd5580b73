#pragma once
// The reweighting pair on small synthetic data, for tests that build the main job's experiment:
// the classifier (lower, a CNN chain, so that checkpointing applies) under the reweighter.
// 60 images per class, 20 for meta, 50 for validation; two steps take well under a second.
// Tests change what they need with `--set`-style overrides.

namespace mlo_test {

inline constexpr const char* kTinyReweighting = R"(experiment: reweighting
name: tiny
seed: 2
threads: 1
engine: {train_iters: 2, valid_step: 0, log_step: 0, save_step: 0}
data: {dataset: synthetic, synthetic_size: 60, synthetic_test_size: 3, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 8, meta_batch_size: 10, test_batch_size: 64}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05}
  reweighter:
    model: {name: mwn, hidden: 4}
    optimizer: {name: adam, lr: 0.01}
)";

}  // namespace mlo_test
