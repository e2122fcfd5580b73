#include <mlo/core/config.h>

namespace mlo {

const char* to_string(Method method) {
  switch (method) {
    case Method::kDarts:
      return "darts";
    case Method::kNeumann:
      return "neumann";
    case Method::kCG:
      return "cg";
  }
  return "unknown";
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::kFP32:
      return "fp32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kFP16:
      return "fp16";
  }
  return "unknown";
}

const char* to_string(Checkpointing checkpointing) {
  switch (checkpointing) {
    case Checkpointing::kNone:
      return "none";
    case Checkpointing::kUniform:
      return "uniform";
    case Checkpointing::kSqrt:
      return "sqrt";
    case Checkpointing::kOptimal:
      return "optimal";
    case Checkpointing::kMinMemory:
      return "min_memory";
  }
  return "unknown";
}

const char* to_string(Mode mode) { return mode == Mode::kMin ? "min" : "max"; }

ProblemConfig& ProblemConfig::method(const DartsOptions& options) {
  method_ = Method::kDarts;
  darts_ = options;
  return *this;
}

ProblemConfig& ProblemConfig::method(const NeumannOptions& options) {
  method_ = Method::kNeumann;
  neumann_ = options;
  return *this;
}

ProblemConfig& ProblemConfig::method(const CGOptions& options) {
  method_ = Method::kCG;
  cg_ = options;
  return *this;
}

ProblemConfig& ProblemConfig::method(Method method) {
  method_ = method;
  return *this;
}

}  // namespace mlo
