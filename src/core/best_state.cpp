#include "best_state.h"

#include "level_runtime.h"

#include <mlo/base/archive.h>
#include <mlo/base/error.h>

#include <torch/torch.h>

#include <string>

namespace mlo {
namespace detail {
namespace {

std::vector<at::Tensor> live_tensors(Problem& problem) {
  std::vector<at::Tensor> out = problem.module().parameters();
  // (under zero3 the sharded parameters are empty; this rank's shards hold their values)
  const LevelRuntime* level = runtime_of(problem);
  if (level != nullptr && level->shards_parameters()) {
    for (const auto& s : problem.parameters()) out.push_back(s);
  }
  for (const auto& b : problem.module().buffers()) out.push_back(b);
  return out;
}

}  // namespace

void BestState::capture(const ProblemList& problems, int64_t step) {
  torch::NoGradGuard no_grad;
  tensors_.clear();
  for (const auto& problem : problems) {
    std::vector<at::Tensor> copies;
    for (const auto& t : live_tensors(*problem)) {
      copies.push_back(t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
    }
    tensors_.push_back(std::move(copies));
  }
  step_ = step;
}

bool BestState::restore(const ProblemList& problems) const {
  if (step_ < 0) return false;
  MLO_CHECK(tensors_.size() == problems.size(), "engine: the best state holds ", tensors_.size(),
            " problems, the engine ", problems.size());
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < problems.size(); ++p) {
    const auto live = live_tensors(*problems[p]);
    MLO_CHECK(live.size() == tensors_[p].size(), "engine: problem '", problems[p]->name(),
              "' has ", live.size(), " tensors, its best state ", tensors_[p].size());
    for (size_t i = 0; i < live.size(); ++i) live[i].detach().copy_(tensors_[p][i]);
  }
  return true;
}

void BestState::save(torch::serialize::OutputArchive& archive) const {
  archive.write("best_step", c10::IValue(step_));
  for (size_t p = 0; p < tensors_.size(); ++p) {
    for (size_t i = 0; i < tensors_[p].size(); ++i) {
      archive.write("best." + std::to_string(p) + "." + std::to_string(i), tensors_[p][i],
                    /*is_buffer=*/true);
    }
  }
}

void BestState::load(torch::serialize::InputArchive& archive,
                     const ProblemList& problems) {
  c10::IValue saved_step;
  step_ = archive.try_read("best_step", saved_step) ? saved_step.toInt() : -1;
  tensors_.clear();
  if (step_ < 0) return;
  for (size_t p = 0; p < problems.size(); ++p) {
    const auto live = live_tensors(*problems[p]);
    std::vector<at::Tensor> copies(live.size());
    for (size_t i = 0; i < live.size(); ++i) {
      MLO_CHECK(archive.try_read("best." + std::to_string(p) + "." + std::to_string(i), copies[i],
                                 /*is_buffer=*/true) &&
                    copies[i].sizes() == live[i].sizes() &&
                    copies[i].scalar_type() == live[i].scalar_type(),
                "engine state: the best validation's tensor ", i, " of problem '",
                problems[p]->name(), "' is missing or has another shape or type (saved from a ",
                "different model?)");
    }
    tensors_.push_back(std::move(copies));
  }
}

}  // namespace detail
}  // namespace mlo
