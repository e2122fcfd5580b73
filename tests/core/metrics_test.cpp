// Metric names and their console form: one sanitizing function for names built from free text,
// 4 significant digits, headline metrics in the declared order; a problem refuses a name with a
// space where it is recorded.
#include <mlo/core/metrics.h>

#include "support/toy.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

namespace metrics_test {

using Catch::Matchers::Contains;

TEST_CASE("Metrics: metric_segment makes free text one segment of a metric name", "[core]") {
  CHECK(mlo::metric_segment("ankle boot") == "ankle_boot");
  CHECK(mlo::metric_segment("t-shirt/top") == "t-shirt_top");
  CHECK(mlo::metric_segment("class3") == "class3");
  CHECK(mlo::metric_segment("l=0.5") == "l=0.5");
  CHECK(mlo::metric_segment("a,b \"c\"\t") == "a_b__c__");
  for (const char* text : {"ankle boot", "t-shirt/top", " ", "a,b", "tab\there"}) {
    INFO(text);
    CHECK(mlo::is_metric_name("valid/acc/" + mlo::metric_segment(text)));
  }
}

TEST_CASE("Metrics: is_metric_name refuses what breaks the log line or the CSV file", "[core]") {
  for (const char* good : {"loss", "valid/acc/ankle_boot", "curve/rare/l=0.01", "wclass/3"}) {
    INFO(good);
    CHECK(mlo::is_metric_name(good));
  }
  for (const char* bad : {"", "valid/acc/ankle boot", "a,b", "a\"b", "a\nb", "a\tb"}) {
    INFO(bad);
    CHECK_FALSE(mlo::is_metric_name(bad));
  }
}

TEST_CASE("Metrics: the console shows 4 significant digits", "[core]") {
  CHECK(mlo::format_metric(0.674874) == "0.6749");
  CHECK(mlo::format_metric(0.75) == "0.75");
  CHECK(mlo::format_metric(1.0) == "1");
  CHECK(mlo::format_metric(0.0005) == "0.0005");
  CHECK(mlo::format_metric(12345.678) == "1.235e+04");
  CHECK(mlo::format_metric(-2.06702) == "-2.067");
  CHECK(mlo::format_metric(std::nan("")) == "nan");
  CHECK(mlo::format_metric(std::numeric_limits<double>::infinity()) == "inf");
}

TEST_CASE("Metrics: a headline holds the named metrics in their order, absent ones skipped",
          "[core]") {
  const mlo::Metrics m{{"acc", 0.75}, {"loss", 0.674874}, {"lr", 0.05}, {"weight_std", 0.0920217},
                       {"wclass/0", 1.20549}};
  CHECK(mlo::format_headline(m, {"loss", "acc", "lr", "mem_peak_mb", "weight_std"}) ==
        "loss 0.6749  acc 0.75  lr 0.05  weight_std 0.09202");
  CHECK(mlo::format_headline(m, {}).empty());
  CHECK(mlo::format_all({{"b", 2.0}, {"a", 1.0}}) == "a 1  b 2");
}

namespace {

struct Labelled : mlo_test::Toy {
  using Toy::Toy;
  std::string extra = "acc";
  torch::Tensor training_step(const mlo::Batch& batch) override {
    log_metric(extra, 0.5);
    return Toy::training_step(batch);
  }
};

}  // namespace

TEST_CASE("Problem: log_metric refuses a name with a space, naming the problem", "[core]") {
  auto p = std::make_shared<Labelled>("inner", mlo::ProblemConfig(), nullptr);
  p->extra = "acc/ankle boot";
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p);
  REQUIRE_THROWS_WITH(engine.run(), Contains("problem 'inner': log_metric got the name "
                                             "'acc/ankle boot'") &&
                                        Contains("mlo::metric_segment"));
}

TEST_CASE("Problem: a step records its loss and learning rate", "[core]") {
  auto p = std::make_shared<Labelled>("inner", mlo::ProblemConfig(), nullptr, 0.5, 0.25);
  mlo::Engine engine(mlo::EngineConfig().train_iters(2));
  engine.add(p);
  engine.run();
  CHECK(p->metrics().at("lr") == 0.25);
  CHECK(p->metrics().at("acc") == 0.5);
  CHECK(p->metrics().count("loss") == 1);
  CHECK(p->headline_metrics() ==
        std::vector<std::string>{"loss", "acc", "lr", "mem_peak_mb"});
}

}  // namespace metrics_test
