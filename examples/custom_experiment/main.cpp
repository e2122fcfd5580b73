// Your own experiment, launched from YAML with the whole `mlo` command line.
//
// Three levels in a chain (as in examples/three_level.cpp), linear regression throughout:
//   student (lowest):  fits the teacher's predictions on unlabeled inputs
//   teacher (middle):  fits the labeled data with an L2 penalty of strength exp(top's value), and
//                      wants the student to do well on a validation set
//   top:               picks the teacher's L2 strength for a second validation set
//
// The experiment class builds these problems from the YAML (distill.yaml): the generic keys
// (engine, optimizers, unroll steps, hypergradient methods, ...) come from mlo, its own keys
// (`data:`, `top:`) it describes itself, with the same file:line:col errors. Registered under
// the name "distill"; main() hands the command line to mlo:
//
//   ./custom_experiment run distill.yaml --set problems.teacher.method=cg
//   ./custom_experiment run distill.yaml --stop-at 100 && ./custom_experiment run distill.yaml
//   --resume
#include "distill_problems.h"

#include <mlo/base/fields.h>
#include <mlo/cli/main.h>
#include <mlo/mlo.h>
#include <mlo/run/builders.h>
#include <mlo/run/device.h>
#include <mlo/run/experiment.h>

#include <torch/torch.h>

#include <algorithm>
#include <sstream>

namespace {

using distill::mse;
using distill::Student;
using distill::Teacher;
using distill::Top;

// The experiment: builds the three problems and the engine from the configuration.
class DistillExperiment : public mlo::run::Experiment {
 public:
  static constexpr const char* kName = "distill";  // `experiment: distill` in YAML
  // The experiment's own YAML keys: `data:` and `top:`, and its rules.
  struct Settings : mlo::run::SettingsFor<Settings> {
    int64_t features = 10;
    int64_t labeled = 40;
    int64_t unlabeled = 400;
    int64_t valid = 200;
    int64_t test = 1000;
    double noise = 0.5;
    double initial_log_strength = -2.0;

    void visit(mlo::Fields& f) override {
      f.section("data", [&](mlo::Fields& s) {
        s("features", features, mlo::at_least(1));
        s("labeled", labeled, mlo::at_least(1));
        s("unlabeled", unlabeled, mlo::at_least(1));
        s("valid", valid, mlo::at_least(1));
        s("test", test, mlo::at_least(1));
        s("noise", noise, mlo::non_negative());
      });
      f.section("top", [&](mlo::Fields& s) { s("initial_log_strength", initial_log_strength); });
    }
    // student -> teacher -> top, unless the YAML says otherwise.
    mlo::run::DependencyConfig default_dependencies(const mlo::run::RunConfig&) const override {
      mlo::run::DependencyConfig graph;
      graph.u2l["top"] = {"teacher"};
      graph.u2l["teacher"] = {"student"};
      graph.l2u["student"] = {"teacher"};
      graph.l2u["teacher"] = {"top"};
      return graph;
    }
    std::vector<std::string> required_problems() const override {
      return {"student", "teacher", "top"};
    }
  };

  explicit DistillExperiment(const mlo::run::RunConfig& config)
      : engine_(config.engine) {
    const auto& s = config.settings_as<Settings>();
    if (config.threads > 0) torch::set_num_threads(static_cast<int>(config.threads));
    torch::manual_seed(static_cast<uint64_t>(config.seed));
    const int64_t d = s.features;
    const auto w_true = torch::randn({d, 1});
    auto make = [&](int64_t n) {
      const auto x = torch::randn({n, d});
      return mlo::Batch(x, x.matmul(w_true) + s.noise * torch::randn({n, 1}));
    };
    // The data is small: it sits whole on the run's device (`device:`), where setup_problem puts
    // the models; the problems' batches and the evaluation sets are read there.
    const c10::Device device = mlo::run::resolve_device(config);
    const mlo::Batch labeled = make(s.labeled).to(device);
    const mlo::Batch unlabeled = mlo::Batch(torch::randn({s.unlabeled, d})).to(device);
    unlabeled_size_ = s.unlabeled;
    valid_mid_ = make(s.valid).to(device);
    valid_top_ = make(s.valid).to(device);
    test_ = make(s.test).to(device);

    // Each problem: its generic settings (method, unroll, ...) and optimizer from the YAML.
    auto problem_config = [&](const std::string& name) { return config.problems.at(name).config; };
    student_ = std::make_shared<Student>("student", problem_config("student"));
    student_->module(torch::nn::Linear(d, 1)).data(std::vector<mlo::Batch>{unlabeled});
    teacher_ = std::make_shared<Teacher>("teacher", problem_config("teacher"));
    teacher_->module(torch::nn::Linear(d, 1)).data(std::vector<mlo::Batch>{labeled});
    teacher_->student_valid = valid_mid_;
    top_ = std::make_shared<Top>("top", problem_config("top"));
    top_->module(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
    {
      torch::NoGradGuard no_grad;
      top_->log_strength().fill_(s.initial_log_strength);
    }
    top_->data(std::vector<mlo::Batch>{valid_top_});
    for (const auto& p : std::vector<mlo::ProblemPtr>{student_, teacher_, top_}) {
      mlo::run::setup_problem(*p, config);  // optimizer and learning-rate schedule
    }
    // The graph from the YAML's dependencies (or the default above), wired by name.
    mlo::run::add_problems(engine_, config, {top_, teacher_, student_});
  }

  mlo::Engine& engine() override { return engine_; }

  mlo::Metrics evaluate(mlo::run::EvalSet set) override {
    torch::NoGradGuard no_grad;
    const bool valid = set == mlo::run::EvalSet::kValid;
    const mlo::Batch& b = valid ? valid_top_ : test_;
    const std::string prefix = valid ? "valid/" : "";
    // In chunks no larger than the largest training batch (the unlabeled set), so that
    // evaluation never holds more than a training step.
    const int64_t chunk = std::max<int64_t>(1, unlabeled_size_);
    const auto chunked_mse = [&](const auto& model) {
      double sum = 0;
      for (int64_t begin = 0; begin < b.size(); begin += chunk) {
        const int64_t end = std::min(b.size(), begin + chunk);
        sum += mse(model->predict(b.data.slice(0, begin, end)), b.target.slice(0, begin, end))
                   .template item<double>() *
               static_cast<double>(end - begin);
      }
      return sum / static_cast<double>(b.size());
    };
    return {{prefix + "teacher_mse", chunked_mse(teacher_)},
            {prefix + "student_mse", chunked_mse(student_)},
            {prefix + "l2_strength", top_->log_strength().exp().item<double>()}};
  }
  std::vector<std::string> metric_names() const override {
    return {"teacher_mse", "student_mse", "l2_strength"};
  }
  std::string describe() const override {
    std::ostringstream out;
    out << "distill: student <- teacher <- top (L2 strength of the teacher), linear regression on "
        << valid_top_.data.size(1) << " features";
    return out.str();
  }

 private:
  int64_t unlabeled_size_ = 0;
  mlo::Engine engine_;
  std::shared_ptr<Student> student_;
  std::shared_ptr<Teacher> teacher_;
  std::shared_ptr<Top> top_;
  mlo::Batch valid_mid_, valid_top_, test_;
};

}  // namespace

MLO_REGISTER_EXPERIMENT(DistillExperiment);

int main(int argc, char** argv) { return mlo::cli::main(argc, argv); }
