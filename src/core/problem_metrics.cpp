// Problem's metrics: what a step records, and what its console line shows.
#include <mlo/core/problem.h>

namespace mlo {

void Problem::log_metric(const std::string& name, double value) {
  MLO_CHECK(is_metric_name(name), "problem '", name_, "': log_metric got the name '", name,
            "'; metric names have no spaces, commas or quotes (build a name from free text ",
            "with mlo::metric_segment)");
  if (call_ != LossCall::kReevaluation) metrics_[name] = value;
}

std::vector<std::string> Problem::headline_metrics() const {
  return {"loss", "acc", "lr", "mem_peak_mb"};
}

}  // namespace mlo
