#pragma once
// The three problems of the distillation chain, linear regression throughout:
//   Student (lowest):  fits the teacher's predictions on unlabeled inputs
//   Teacher (middle):  fits the labeled data with an L2 penalty of strength exp(Top's value), and
//                      wants the student to do well on a validation set (`student_valid`)
//   Top:               picks the teacher's L2 strength for a second validation set
// Each level's parameters enter the loss of the level below (u2l) and the level below's
// parameters enter its own loss (l2u). Each reaches the others through typed handles, which the
// engine links when it starts (by type here: each kind of problem appears once) and which do not
// own: the engine does.
// Used by examples/three_level.cpp (wired in code) and main.cpp here (built from YAML).
#include <mlo/mlo.h>
#include <torch/torch.h>

namespace distill {

inline torch::Tensor mse(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).pow(2).mean();
}

struct Teacher;
struct Top;

struct Student : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Teacher> teacher{this};
  torch::Tensor predict(const torch::Tensor& x) const {
    return module_as<torch::nn::LinearImpl>()->forward(x);
  }
  torch::Tensor training_step(const mlo::Batch& b) override;
};

struct Teacher : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Student> student{this};
  mlo::Handle<Top> top{this};
  mlo::Batch student_valid;
  torch::Tensor predict(const torch::Tensor& x) const {
    return module_as<torch::nn::LinearImpl>()->forward(x);
  }
  torch::Tensor training_step(const mlo::Batch& b) override;
};

struct Top : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Teacher> teacher{this};
  torch::Tensor log_strength() const { return module().parameters()[0]; }
  torch::Tensor training_step(const mlo::Batch& b) override {
    return mse(teacher->predict(b.data), b.target);
  }
};

inline torch::Tensor Student::training_step(const mlo::Batch& b) {
  return mse(predict(b.data), teacher->predict(b.data));
}

inline torch::Tensor Teacher::training_step(const mlo::Batch& b) {
  const auto& w = module_as<torch::nn::LinearImpl>()->weight;
  return mse(predict(b.data), b.target) + top->log_strength().exp().sum() * w.pow(2).sum() +
         mse(student->predict(student_valid.data), student_valid.target);
}

}  // namespace distill
