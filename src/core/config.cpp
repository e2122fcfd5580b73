#include <mlo/core/config.h>

#include <mlo/base/choice.h>

namespace mlo {

ProblemConfig& ProblemConfig::method(const std::string& name) {
  method_ = method_options(name);
  return *this;
}

const MethodOptions& ProblemConfig::method() const {
  // NOTE: looked up on use, not at construction: a config may be built during static
  // initialization, before the built-in methods have registered.
  return method_ ? *method_ : registered_defaults(kDefaultMethod);
}

void ProblemConfig::visit(Fields& f) {
  f("unroll_steps", unroll_steps_, at_least(1));
  f("warmup_steps", warmup_steps_, at_least(0));
  f("roll_back", roll_back_);
  f("gradient_clipping", gradient_clipping_, non_negative());
  f("gradient_accumulation", gradient_accumulation_, at_least(1));
  f.enumeration("precision", precision_);
  f.section("loss_scaling", [&](Fields& s) {
    bool enabled = loss_scaling_.has_value();
    LossScaling scaling = loss_scaling_.value_or(LossScaling());
    s("enabled", enabled);
    scaling.visit(s);
    if (!enabled) {
      // Options of a loss scaling that is off would be dropped without a word.
      LossScaling defaults;
      const auto given = field_values([&](Fields& v) { scaling.visit(v); });
      const auto fallback = field_values([&](Fields& v) { defaults.visit(v); });
      for (const auto& [key, value] : given) {
        if (fallback.at(key) == value) continue;
        s.refuse(key.c_str(), "is set (" + value + "), but loss scaling is off (enabled is " +
                                  "not true), so it would have no effect; add 'enabled: true' " +
                                  "to the section, or remove the option");
      }
    }
    loss_scaling_ = enabled ? std::optional<LossScaling>(scaling) : std::nullopt;
  });
  f.section("checkpointing", [&](Fields& s) { checkpointing_.visit(s); });
  // (a copy: configurations share their options, and a read must not change another's)
  std::shared_ptr<MethodOptions> options = method().clone();
  visit_choice(f, "method", options, method_names(), method_options, ChoiceKeys::kOwnSection);
  method_ = options;
  f("log_step", log_step_, at_least(0));
  f("data_parallel", data_parallel_);
  f("allow_unused_parameters", allow_unused_parameters_);
  f.enumeration("offload", offload_);
}

void EarlyStopping::visit(Fields& f) {
  f("enabled", enabled_);
  f("metric", metric_);
  f.enumeration("mode", mode_);
  f("tolerance", tolerance_, at_least(1));
  f("min_delta", min_delta_, non_negative());
  f("restore_best", restore_best_);
}

void EngineConfig::visit(Fields& f) {
  f("train_iters", train_iters_, at_least(0));
  f("valid_step", valid_step_, at_least(0));
  f("log_step", log_step_, at_least(0));
  f("track_memory", track_memory_);
  f.section("early_stopping", [&](Fields& s) { early_stopping_.visit(s); });
  f.enumeration("strategy", strategy_);
  f.enumeration("backend", backend_);
  f("timeout_s", timeout_s_, above_up_to(0, kMaxTimeoutSeconds));
}

std::optional<OptionError> ProblemConfig::validate(const EngineConfig& engine) const {
  if (roll_back_ && gradient_accumulation_ > 1) {
    return OptionError{"roll_back", "with gradient_accumulation > 1 is not supported (the redone "
                                    "step would see one micro-batch)"};
  }
  const bool zero3 = engine.strategy() == dist::Strategy::kZero3 && data_parallel_;
  const Checkpointing plan = checkpointing_.strategy();
  // NOTE: optimal and min_memory pick segments by each rank's own measured block times; under
  // zero3 two ranks could pick different plans, whose gathers (3 per checkpointed block, 2 per
  // stored one) would not pair up.
  if (zero3 && (plan == Checkpointing::kOptimal || plan == Checkpointing::kMinMemory)) {
    return OptionError{"checkpointing.strategy",
                       std::string(to_string(plan)) + " plans from this rank's own block " +
                           "timings, which under engine.strategy zero3 could differ between " +
                           "ranks (and so would their collectives); use uniform or sqrt"};
  }
  if (offload_ == Offload::kCpu && !zero3) {
    return OptionError{"offload",
                       std::string("cpu moves the parameter shards of strategy zero3, which ") +
                           "needs engine.strategy zero3 and data_parallel true (this run: " +
                           "strategy " + dist::to_string(engine.strategy()) +
                           (data_parallel_ ? "" : ", data_parallel false") + ")"};
  }
  if (auto broken = method().validate()) {
    return OptionError{method().name() + "." + broken->key, broken->what};
  }
  return std::nullopt;
}

std::optional<OptionError> EngineConfig::validate() const {
  if (early_stopping_.enabled() && valid_step_ == 0) {
    return OptionError{"early_stopping",
                       "needs valid_step > 0 (validation supplies its metric)"};
  }
  return std::nullopt;
}

}  // namespace mlo
