// Problem's metrics: what a step records, and what its console line shows.
#include <mlo/core/problem.h>

#include "zero3.h"

#include <c10/util/StringUtil.h>

#include <mlo/memory/meter.h>

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

void Problem::record_step_metrics(int64_t peak_bytes) {
  if (optimizer_ && !optimizer_->param_groups().empty()) {
    metrics_["lr"] = optimizer_->param_groups().front().options().get_lr();
  }
  if (meter_) metrics_["mem_peak_mb"] = memory::to_mib(peak_bytes);
  if (scaler_) {
    // Dynamic loss scaling: where the scale stands and how many windows it has skipped, so a
    // run whose fp16 level keeps overflowing (or whose first steps were dropped) says so.
    metrics_["loss_scale"] = scaler_->scale();
    metrics_["skipped_steps"] = static_cast<double>(scaler_->skipped_steps());
  }
}

std::string Problem::sharding_summary() const {
  if (!zero3_) return "";
  const auto& t = zero3_->traffic();
  return c10::str("problem '", name_, "': zero3 shards of ", zero3_->shard_bytes(), " bytes; ",
                  t.gathers, " all-gathers (", t.gather_seconds, " s), ", t.reduce_scatters,
                  " reduce-scatters (", t.reduce_scatter_seconds, " s) in this process");
}

}  // namespace mlo
