#include <mlo/core/environment.h>

#include <mlo/base/error.h>

#include <utility>

namespace mlo {
namespace {

// Draws `environment->batch(role)` at every `next()`; its position is the environment's (saved
// with the engine's state), so the stream has none of its own.
class EnvironmentStream : public BatchStream {
 public:
  EnvironmentStream(std::shared_ptr<Environment> environment, std::string role)
      : environment_(std::move(environment)), role_(std::move(role)) {}
  Batch next() override { return environment_->batch(role_); }

 private:
  std::shared_ptr<Environment> environment_;
  std::string role_;
};

}  // namespace

Batch Environment::batch(const std::string& role) {
  throw Error("this environment hands out no batches (asked for role '" + role +
              "'): override Environment::batch");
}

std::shared_ptr<BatchStream> Environment::stream(const std::string& role) {
  std::shared_ptr<Environment> self = weak_from_this().lock();
  MLO_CHECK(self, "Environment::stream: the environment must be owned by a std::shared_ptr ",
            "(std::make_shared<...>) to hand out streams");
  return std::make_shared<EnvironmentStream>(std::move(self), role);
}

}  // namespace mlo
