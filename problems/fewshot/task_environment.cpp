#include "problems/fewshot/task_environment.h"

#include <mlo/base/archive.h>
#include <mlo/base/error.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>

#include <utility>

namespace mlo {
namespace problems {
namespace fewshot {

TaskEnvironment::TaskEnvironment(std::shared_ptr<const TaskSampler> sampler, int64_t period,
                                 uint64_t seed)
    : sampler_(std::move(sampler)), period_(period), generator_(at::detail::createCPUGenerator()) {
  MLO_CHECK(sampler_, "TaskEnvironment: no task sampler");
  MLO_CHECK(period_ >= 1, "TaskEnvironment: period must be >= 1, got ", period_);
  generator_.set_current_seed(seed);
}

void TaskEnvironment::step(int64_t global_step) {
  if ((global_step - 1) % period_ != 0) return;
  task_ = sampler_->sample(generator_);
  ++drawn_;
}

Batch TaskEnvironment::batch(const std::string& role) {
  MLO_CHECK(task_.support.size() > 0, "TaskEnvironment: no task drawn yet (read a batch after ",
            "the engine's first step)");
  if (role == "support") return task_.support;
  if (role == "query") return task_.query;
  throw Error("TaskEnvironment: unknown role '" + role + "' (roles: support, query)");
}

void TaskEnvironment::save(torch::serialize::OutputArchive& archive) const {
  archive.write("generator", generator_.get_state());
  archive.write("drawn", c10::IValue(drawn_));
  if (drawn_ > 0) {
    archive.write("support_data", task_.support.data);
    archive.write("support_target", task_.support.target);
    archive.write("query_data", task_.query.data);
    archive.write("query_target", task_.query.target);
  }
}

void TaskEnvironment::load(torch::serialize::InputArchive& archive) {
  at::Tensor state;
  archive.read("generator", state);
  generator_.set_state(state);
  drawn_ = mlo::archive::read_int(archive, "drawn", "task environment");
  if (drawn_ > 0) {
    // (into new tensors: the batches handed out before share the old ones)
    const auto read = [&](const char* key) {
      at::Tensor t;
      archive.read(key, t);
      return t;
    };
    task_.support = Batch(read("support_data"), read("support_target"));
    task_.query = Batch(read("query_data"), read("query_target"));
  }
}

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
