#include "problems/fewshot/tasks.h"

#include <mlo/base/error.h>

#include <ATen/ATen.h>

#include <cmath>
#include <sstream>
#include <utility>

namespace mlo {
namespace problems {
namespace fewshot {

SinusoidTasks::SinusoidTasks(int64_t shots, int64_t queries) : shots_(shots), queries_(queries) {
  MLO_CHECK(shots >= 1 && queries >= 1, "sinusoid tasks: shots and queries must be >= 1, got ",
            shots, " and ", queries);
}

Task SinusoidTasks::sample(at::Generator& generator) const {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const double amplitude = at::empty({1}, f32).uniform_(0.1, 5.0, generator).item<double>();
  const double phase = at::empty({1}, f32).uniform_(0.0, M_PI, generator).item<double>();
  const auto points = [&](int64_t n) {
    const at::Tensor x = at::empty({n, 1}, f32).uniform_(-5.0, 5.0, generator);
    return Batch(x, amplitude * at::sin(x - phase));
  };
  Task task;
  task.support = points(shots_);
  task.query = points(queries_);
  return task;
}

std::string SinusoidTasks::describe() const {
  std::ostringstream out;
  out << "sinusoid regression (amplitude 0.1-5, phase 0-pi, x in [-5, 5]), " << shots_
      << " support and " << queries_ << " query points per task";
  return out.str();
}

ClassTasks::ClassTasks(at::Tensor images, const at::Tensor& labels, std::vector<int64_t> classes,
                       int64_t ways, int64_t shots, int64_t queries, std::string name)
    : images_(std::move(images)),
      classes_(std::move(classes)),
      ways_(ways),
      shots_(shots),
      queries_(queries),
      name_(std::move(name)) {
  MLO_CHECK(ways >= 2 && shots >= 1 && queries >= 1, name_, ": ways must be >= 2, shots and ",
            "queries >= 1, got ", ways, ", ", shots, ", ", queries);
  MLO_CHECK(static_cast<int64_t>(classes_.size()) >= ways, name_, ": ", ways,
            "-way tasks need at least ", ways, " classes, got ", classes_.size());
  for (const int64_t c : classes_) {
    const at::Tensor index = labels.eq(c).nonzero().squeeze(1);
    MLO_CHECK(index.numel() >= shots + queries, name_, ": class ", c, " has ", index.numel(),
              " images, fewer than shots + queries = ", shots + queries);
    by_class_.push_back(index);
  }
}

Task ClassTasks::sample(at::Generator& generator) const {
  const int64_t n = static_cast<int64_t>(classes_.size());
  const at::Tensor order = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  std::vector<at::Tensor> support, query, support_y, query_y;
  for (int64_t way = 0; way < ways_; ++way) {
    const at::Tensor& pool = by_class_[static_cast<size_t>(order[way].item<int64_t>())];
    const at::Tensor pick = pool.index_select(
        0, at::randperm(pool.numel(), generator, pool.options()).slice(0, 0, shots_ + queries_));
    support.push_back(pick.slice(0, 0, shots_));
    query.push_back(pick.slice(0, shots_));
    support_y.push_back(at::full({shots_}, way, at::TensorOptions().dtype(at::kLong)));
    query_y.push_back(at::full({queries_}, way, at::TensorOptions().dtype(at::kLong)));
  }
  Task task;
  task.support = Batch(images_.index_select(0, at::cat(support)), at::cat(support_y));
  task.query = Batch(images_.index_select(0, at::cat(query)), at::cat(query_y));
  return task;
}

std::string ClassTasks::describe() const {
  std::ostringstream out;
  out << name_ << ": " << ways_ << "-way " << shots_ << "-shot (" << queries_
      << " query images per class) from classes";
  for (const int64_t c : classes_) out << " " << c;
  return out.str();
}

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
