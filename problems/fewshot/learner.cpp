#include "problems/fewshot/learner.h"

#include <mlo/base/error.h>
#include <mlo/run/builders.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/utils.h>

#include <utility>

namespace mlo {
namespace problems {
namespace fewshot {
namespace {

// reg/2 |a - b|^2 over two parameter lists of the same shapes (b held fixed).
at::Tensor proximal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                    double reg) {
  at::Tensor sum = at::zeros({}, a.front().options());
  for (size_t i = 0; i < a.size(); ++i) sum = sum + (a[i] - b[i].detach()).pow(2).sum();
  return 0.5 * reg * sum;
}

}  // namespace

at::Tensor task_loss(const at::Tensor& output, const at::Tensor& target, bool regression) {
  if (regression) return torch::nn::functional::mse_loss(output, target);
  return torch::nn::functional::cross_entropy(output, target);
}

Learner::Learner(std::string name, ProblemConfig config, double reg, bool regression)
    : Problem(std::move(name), std::move(config)), reg_(reg), regression_(regression) {
  MLO_CHECK(reg >= 0, "problem '", this->name(), "': reg must be >= 0, got ", reg);
  MLO_CHECK(!this->config().method().make()->differentiates_unroll(), "problem '", this->name(),
            "': the method '", this->config().method().name(),
            "' differentiates the inner steps from their start, which the learner resets to the "
            "meta-learner's parameters outside its graph; use cg, neumann, darts, sama or "
            "first_order");
}

at::Tensor Learner::forward(const at::Tensor& x) const {
  return module_as<torch::nn::SequentialImpl>()->forward(x);
}

at::Tensor Learner::training_step(const Batch& batch) {
  at::Tensor loss = task_loss(forward(batch.data), batch.target, regression_);
  if (reg_ > 0) {
    // theta enters the loss here (and only here): its hypergradient is iMAML's.
    const std::vector<at::Tensor> phi = module().parameters();
    const std::vector<at::Tensor> theta = meta->module().parameters();
    at::Tensor sum = at::zeros({}, loss.options());
    for (size_t i = 0; i < phi.size(); ++i) sum = sum + (phi[i] - theta[i]).pow(2).sum();
    loss = loss + 0.5 * reg_ * sum;
  }
  return loss;
}

void Learner::on_inner_loop_start() {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> phi = module().parameters();
  const std::vector<at::Tensor> theta = meta->module().parameters();
  MLO_CHECK(phi.size() == theta.size(), "problem '", name(), "': its model and the ",
            "meta-learner's differ (", phi.size(), " and ", theta.size(), " tensors)");
  for (size_t i = 0; i < phi.size(); ++i) phi[i].copy_(theta[i]);
  // A new task: no momentum or moments from the last one (evaluation's adaptation, too, starts
  // with a fresh optimizer).
  optimizer().state().clear();
}

at::Tensor MetaLearner::training_step(const Batch& batch) {
  const at::Tensor output = learner->forward(batch.data);
  if (!learner->regression() && loss_call() == LossCall::kOwnStep) {
    log_metric("acc", output.argmax(1).eq(batch.target).to(at::kDouble).mean().item<double>());
  }
  return task_loss(output, batch.target, learner->regression());
}

torch::nn::Sequential make_model(bool regression, int64_t outputs, int64_t hidden,
                                 int64_t channels, const std::vector<int64_t>& image) {
  torch::nn::Sequential model;
  if (regression) {
    model->push_back(torch::nn::Linear(1, hidden));
    model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::Linear(hidden, hidden));
    model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::Linear(hidden, outputs));
    return model;
  }
  MLO_CHECK(image.size() == 3, "make_model: images must be C x H x W");
  int64_t in = image[0], h = image[1], w = image[2];
  for (int block = 0; block < 2; ++block) {
    model->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(in, channels, 3).padding(1)));
    model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
    in = channels;
    h /= 2;
    w /= 2;
  }
  model->push_back(torch::nn::Flatten());
  model->push_back(torch::nn::Linear(channels * h * w, outputs));
  return model;
}

Adapted adapt(const torch::nn::Sequential& start, const Task& task, int64_t steps,
              const run::OptimizerConfig& optimizer, double reg, double clip, bool regression,
              int64_t new_head) {
  auto copy = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(start->clone());
  MLO_INTERNAL_ASSERT(copy, "adapt: the clone of a Sequential is not one");
  std::vector<at::Tensor> anchor;
  for (const auto& p : start->parameters()) anchor.push_back(p.detach().clone());
  if (new_head > 0) {
    auto last = copy->ptr(copy->size() - 1)->as<torch::nn::LinearImpl>();
    MLO_CHECK(last != nullptr, "adapt: the model's last layer is not linear");
    const int64_t in = last->options.in_features();
    torch::nn::Sequential rebuilt;
    for (auto it = copy->begin(); it + 1 != copy->end(); ++it) rebuilt->push_back(*it);
    torch::nn::Linear head(in, new_head);
    head->to(last->weight.device(), last->weight.scalar_type());
    rebuilt->push_back(head);
    copy = rebuilt.ptr();
    reg = 0.0;  // (no anchor for a new head)
  }
  auto opt = run::make_optimizer(optimizer, *copy, "adapt");
  const std::vector<at::Tensor> params = copy->parameters();
  for (int64_t step = 0; step < steps; ++step) {
    opt->zero_grad();
    at::Tensor loss = task_loss(copy->forward(task.support.data), task.support.target, regression);
    if (reg > 0) loss = loss + proximal(params, anchor, reg);
    loss.backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(params, clip);
    opt->step();
  }
  torch::NoGradGuard no_grad;
  const at::Tensor output = copy->forward(task.query.data);
  Adapted out;
  out.loss = task_loss(output, task.query.target, regression).item<double>();
  if (!regression) {
    out.acc = output.argmax(1).eq(task.query.target).to(at::kDouble).mean().item<double>();
  }
  return out;
}

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
