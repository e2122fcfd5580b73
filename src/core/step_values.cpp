// Problem::step_value: values fixed at a problem's own step on a batch, returned whenever the
// loss of that batch is evaluated again, and saved with the problem's state.
#include <mlo/core/problem.h>

#include <mlo/core/stop_gradient.h>

#include <torch/serialize/archive.h>

#include <algorithm>
#include <string>

namespace mlo {

at::Tensor Problem::step_value(const Batch& of, const std::string& key, const at::Tensor& value) {
  MLO_CHECK(!key.empty(), "problem '", name_, "': step_value needs a non-empty key");
  MLO_CHECK(value.defined(), "problem '", name_, "': step_value('", key,
            "') got an undefined tensor");
  if (!of.data.defined()) return stop_gradient(value, key);
  const c10::TensorImpl* batch = of.data.unsafeGetTensorImpl();
  auto same = [&](const StepValue& v) {
    return v.key == key && !v.batch.expired() && v.batch._unsafe_get_target() == batch;
  };
  if (call_ != LossCall::kOwnStep) {
    const auto found = std::find_if(step_values_.begin(), step_values_.end(), same);
    if (found != step_values_.end() && found->value.sizes() == value.sizes()) return found->value;
    return stop_gradient(value, "problem '" + name_ + "': step value '" + key +
                                    "' (of a batch no own step kept it for)");
  }
  step_values_.erase(std::remove_if(step_values_.begin(), step_values_.end(), same),
                     step_values_.end());
  step_values_.push_back({StepValue::Ref(of.data.getIntrusivePtr()), key,
                          value.detach().clone()});
  // The batches a method may evaluate again: the accumulation window, for every step of an
  // unroll a method replays.
  const auto kept = static_cast<size_t>(std::max<int64_t>(1, config_.gradient_accumulation()) *
                                        std::max<int64_t>(1, config_.unroll_steps()));
  size_t of_key = 0;
  for (auto it = step_values_.rbegin(); it != step_values_.rend(); ++it) {
    if (it->key == key) ++of_key;
  }
  for (auto it = step_values_.begin(); of_key > kept && it != step_values_.end();) {
    if (it->key == key) {
      it = step_values_.erase(it);
      --of_key;
    } else {
      ++it;
    }
  }
  return step_values_.back().value;
}

void Problem::forget_step_values(const std::string& key) {
  step_values_.erase(std::remove_if(step_values_.begin(), step_values_.end(),
                                    [&](const StepValue& v) { return v.key == key; }),
                     step_values_.end());
}

void Problem::save_step_values(torch::serialize::OutputArchive& archive) const {
  // Those of the latest accumulation window's batches, which a parent re-evaluates after a
  // resume: entry k is a key (its bytes), the batch's position in the window and the value.
  int64_t count = 0;
  for (size_t i = 0; i < window_.size(); ++i) {
    if (!window_[i].data.defined()) continue;
    const c10::TensorImpl* batch = window_[i].data.unsafeGetTensorImpl();
    for (const auto& v : step_values_) {
      if (v.batch.expired() || v.batch._unsafe_get_target() != batch) continue;
      const std::string k = std::to_string(count++);
      archive.write("key." + k,
                    at::tensor(at::ArrayRef<uint8_t>(
                        reinterpret_cast<const uint8_t*>(v.key.data()), v.key.size()))
                        .clone(),
                    /*is_buffer=*/true);
      archive.write("batch." + k, at::tensor(static_cast<int64_t>(i)), /*is_buffer=*/true);
      archive.write("value." + k, v.value, /*is_buffer=*/true);
    }
  }
  archive.write("count", c10::IValue(count));
}

void Problem::load_step_values(torch::serialize::InputArchive& archive) {
  step_values_.clear();
  c10::IValue count;
  if (!archive.try_read("count", count)) return;
  for (int64_t k = 0; k < count.toInt(); ++k) {
    const std::string n = std::to_string(k);
    at::Tensor key, batch, value;
    archive.read("key." + n, key, /*is_buffer=*/true);
    archive.read("batch." + n, batch, /*is_buffer=*/true);
    archive.read("value." + n, value, /*is_buffer=*/true);
    key = key.cpu().contiguous();
    const int64_t i = batch.item<int64_t>();
    MLO_CHECK(i >= 0 && static_cast<size_t>(i) < window_.size() && window_[i].data.defined(),
              "problem '", name_, "': the saved state holds a step value of batch ", i,
              " of an accumulation window of ", window_.size());
    step_values_.push_back(
        {StepValue::Ref(window_[i].data.getIntrusivePtr()),
         std::string(reinterpret_cast<const char*>(key.data_ptr<uint8_t>()),
                     static_cast<size_t>(key.numel())),
         value});
  }
}

}  // namespace mlo
