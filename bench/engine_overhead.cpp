// Engine overhead on the HPO scenario (problems/hpo): microseconds per global step for mlo and
// for a hand-written LibTorch loop doing the same math (same data, same optimizers, same
// hypergradient formulas), on one thread, measured in the same run. Last line:
// overhead_ratio=<mlo / hand-written, darts>.
#include "problems/hpo/logreg.h"

#include <mlo/mlo.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace hpo = mlo::problems::hpo;
using torch::Tensor;
using TensorList = std::vector<Tensor>;

namespace {

constexpr int64_t kUnroll = 100;

// ---- Hand-written bilevel loop --------------------------------------------------------------

struct Hand {
  torch::nn::Linear linear{20, 1};
  Tensor lambda = torch::ones({20}, torch::requires_grad());
  torch::optim::SGD inner_opt{linear->parameters(), torch::optim::SGDOptions(0.1)};
  torch::optim::SGD outer_opt{{lambda}, torch::optim::SGDOptions(1.0).momentum(0.9)};
  int64_t count = 0;

  Tensor inner_loss(const mlo::Batch& b) {
    return torch::binary_cross_entropy_with_logits(linear->forward(b.data).squeeze(-1), b.target) +
           0.5 * (lambda * linear->weight.squeeze(0).pow(2)).sum();
  }
  Tensor outer_loss(const mlo::Batch& b) {
    return torch::binary_cross_entropy_with_logits(linear->forward(b.data).squeeze(-1), b.target);
  }
};

Tensor dot(const TensorList& a, const TensorList& b) {
  Tensor out = torch::zeros({}, a[0].options());
  for (size_t i = 0; i < a.size(); ++i) out = out + (a[i] * b[i]).sum();
  return out;
}

// -(d2L/dlambda dw) x for the inner loss on `b`, given x ~ H^-1 v from `solve`.
Tensor implicit(Hand& h, const mlo::Batch& b, const TensorList& v, const std::string& method) {
  auto params = h.linear->parameters();
  if (method == "darts") {
    double norm = 0;
    for (const auto& t : v) norm += t.pow(2).sum().item<double>();
    const double eps = 0.01 / std::sqrt(norm);
    TensorList saved;
    {
      torch::NoGradGuard g;
      for (size_t i = 0; i < params.size(); ++i) {
        saved.push_back(params[i].clone());
        params[i].add_(v[i], eps);
      }
    }
    Tensor gp = torch::autograd::grad({h.inner_loss(b)}, {h.lambda})[0];
    {
      torch::NoGradGuard g;
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]).sub_(v[i], eps);
    }
    Tensor gn = torch::autograd::grad({h.inner_loss(b)}, {h.lambda})[0];
    {
      torch::NoGradGuard g;
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
    }
    return (gn - gp) / (2 * eps);
  }
  TensorList g = torch::autograd::grad({h.inner_loss(b)}, params, {}, true, true);
  auto hvp = [&](const TensorList& x) { return torch::autograd::grad(g, params, x, true); };
  TensorList x;
  if (method == "neumann") {  // 5 iterations, alpha 1
    TensorList cur = v, p = v;
    for (int k = 0; k < 5; ++k) {
      TensorList hv = hvp(cur);
      for (size_t i = 0; i < cur.size(); ++i) {
        cur[i] = cur[i] - hv[i];
        p[i] = p[i] + cur[i];
      }
    }
    x = p;
  } else {  // cg: 3 iterations on (0.1 H) x = 0.1 v
    const double a = 0.1;
    TensorList r, p;
    for (const auto& t : v) {
      x.push_back(torch::zeros_like(t));
      r.push_back(a * t);
      p.push_back(a * t);
    }
    Tensor rr = dot(r, r);
    for (int k = 0; k < 3; ++k) {
      TensorList ap = hvp(p);
      for (auto& t : ap) t = a * t;
      const Tensor step = rr / dot(p, ap);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = x[i] + step * p[i];
        r[i] = r[i] - step * ap[i];
      }
      const Tensor rr_new = dot(r, r);
      for (size_t i = 0; i < p.size(); ++i) p[i] = r[i] + (rr_new / rr) * p[i];
      rr = rr_new;
    }
  }
  return -torch::autograd::grad(g, {h.lambda}, x)[0];
}

void hand_step(Hand& h, const hpo::LogRegData& data, const std::string& method) {
  if (h.count % kUnroll == 0) {
    torch::NoGradGuard g;
    for (auto& p : h.linear->parameters()) p.zero_();
  }
  ++h.count;
  auto params = h.linear->parameters();
  TensorList grads = torch::autograd::grad({h.inner_loss(data.train)}, params);
  for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
  h.inner_opt.step();
  for (auto& p : params) p.mutable_grad().reset();
  if (h.count % kUnroll != 0) return;
  TensorList v = torch::autograd::grad({h.outer_loss(data.valid)}, params);
  h.lambda.mutable_grad() = implicit(h, data.train, v, method);
  h.outer_opt.step();
  h.lambda.mutable_grad().reset();
  torch::NoGradGuard g;
  h.lambda.clamp_min_(1e-8);
}

// ---- Timing ---------------------------------------------------------------------------------

double micros_per_step(const std::function<void()>& step, int64_t steps) {
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(end - start).count() / steps;
}

mlo::ProblemConfig config_for(const std::string& method) {
  auto c = mlo::ProblemConfig().unroll_steps(kUnroll);
  if (method == "neumann") return c.method(mlo::NeumannOptions().iterations(5).alpha(1.0));
  if (method == "cg") return c.method(mlo::CGOptions().iterations(3).alpha(0.1));
  return c.method(mlo::DartsOptions().alpha(0.01));
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  spdlog::set_level(spdlog::level::warn);
  const auto data = hpo::make_logreg_data(1000, 20, 0.1, /*seed=*/0);
  const int64_t steps = 2000;
  const int repeats = 5;

  double darts_ratio = 0;
  std::printf("%-8s %14s %14s %8s\n", "method", "mlo us/step", "hand us/step", "ratio");
  for (const std::string method : {"darts", "neumann", "cg"}) {
    std::vector<double> mlo_times, hand_times;
    for (int r = 0; r < repeats; ++r) {  // interleaved, best of `repeats`
      auto pair = hpo::make_logreg_hpo(data, config_for(method));
      mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
      engine.add(pair.outer).add(pair.inner).link(pair.outer, pair.inner);
      engine.initialize();
      mlo_times.push_back(micros_per_step([&] { engine.step(); }, steps));

      Hand hand;
      hand_times.push_back(micros_per_step([&] { hand_step(hand, data, method); }, steps));
    }
    const double m = *std::min_element(mlo_times.begin(), mlo_times.end());
    const double h = *std::min_element(hand_times.begin(), hand_times.end());
    std::printf("%-8s %14.2f %14.2f %8.3f\n", method.c_str(), m, h, m / h);
    if (method == "darts") darts_ratio = m / h;
  }
  std::printf("overhead_ratio=%.3f\n", darts_ratio);
}
