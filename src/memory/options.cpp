#include <mlo/memory/options.h>

namespace mlo {

void LossScaling::visit(Fields& f) {
  f("init_scale", init_scale_, positive());
  f("growth_factor", growth_factor_, above(1));
  f("backoff_factor", backoff_factor_, between(0, 1));
  f("growth_interval", growth_interval_, at_least(1));
}

namespace memory {

void ProfileOptions::visit(Fields& f) {
  f("repeats", repeats_, at_least(1));
  f("process_cpu_time", process_cpu_time_);
}

void CostModel::visit(Fields& f) { f("keep_param_grads", keep_param_grads_); }

}  // namespace memory

void CheckpointingOptions::visit(Fields& f) {
  f.enumeration("strategy", strategy_);
  f("segments", segments_, at_least(1));
  f("budget_bytes", budget_bytes_, at_least(0));
  f("budget_fraction", budget_fraction_, above_up_to(0, 1));
  f("max_overhead", max_overhead_, non_negative());
  f.section("cost_model", [&](Fields& s) { cost_model_.visit(s); });
  f.section("profile", [&](Fields& s) { profile_.visit(s); });
}

}  // namespace mlo
