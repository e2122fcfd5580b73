#pragma once
/// \file
/// Few-shot tasks: a support set to adapt on and a query set to be judged on, drawn by a
/// `TaskSampler` from a seeded generator.
///
/// - `SinusoidTasks`: the regression of the MAML paper (Finn et al., 2017): y = A sin(x - phi)
///   with A ~ U[0.1, 5], phi ~ U[0, pi], x ~ U[-5, 5]; K support points, Q query points.
/// - `ClassTasks`: N-way K-shot classification from a labelled image set restricted to some of
///   its classes: N of them drawn without replacement, K support and Q query images of each
///   (disjoint), relabelled 0..N-1 in the drawn order.

#include <mlo/core/batch.h>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace fewshot {

/// One task: the support set (what the lower level adapts on) and the query set.
struct Task {
  Batch support;
  Batch query;
};

/// Draws tasks from a generator (every draw uses it alone, so a saved generator state gives the
/// same tasks again).
class TaskSampler {
 public:
  virtual ~TaskSampler() = default;
  /// A new task.
  virtual Task sample(at::Generator& generator) const = 0;
  /// The model's output size: 1 for regression, N for N-way classification.
  virtual int64_t outputs() const = 0;
  /// Whether the tasks are regression (mean squared error) rather than classification.
  virtual bool regression() const = 0;
  /// One line for logs (what the tasks are, their sizes).
  virtual std::string describe() const = 0;
};

/// The sinusoid regression tasks (file comment). Inputs and targets are float32, N x 1.
class SinusoidTasks : public TaskSampler {
 public:
  /// `shots` support points and `queries` query points per task (both >= 1).
  SinusoidTasks(int64_t shots, int64_t queries);
  Task sample(at::Generator& generator) const override;
  int64_t outputs() const override { return 1; }
  bool regression() const override { return true; }
  std::string describe() const override;

 private:
  int64_t shots_;
  int64_t queries_;
};

/// N-way K-shot tasks (file comment) from `images` (N x ..., float) and `labels` (int64), over
/// the classes `classes` only.
class ClassTasks : public TaskSampler {
 public:
  /// Throws `mlo::Error` when fewer than `ways` classes are given, or a class has fewer than
  /// `shots + queries` images.
  ClassTasks(at::Tensor images, const at::Tensor& labels, std::vector<int64_t> classes,
             int64_t ways, int64_t shots, int64_t queries, std::string name);
  Task sample(at::Generator& generator) const override;
  int64_t outputs() const override { return ways_; }
  bool regression() const override { return false; }
  std::string describe() const override;

 private:
  at::Tensor images_;
  std::vector<at::Tensor> by_class_;  // indices into images_, one tensor per entry of classes_
  std::vector<int64_t> classes_;
  int64_t ways_;
  int64_t shots_;
  int64_t queries_;
  std::string name_;
};

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
