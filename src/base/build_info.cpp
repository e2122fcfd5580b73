#include <mlo/base/build_info.h>
#include <mlo/build_config.h>

#include "git_commit.h"  // generated at build time (cmake/git_commit.cmake)

#include <torch/version.h>

namespace mlo {

BuildInfo build_info() {
  BuildInfo info;
  info.version = std::to_string(MLO_VERSION_MAJOR) + "." + std::to_string(MLO_VERSION_MINOR) +
                 "." + std::to_string(MLO_VERSION_PATCH);
  info.git_commit = MLO_GIT_COMMIT;
  info.torch_version = TORCH_VERSION;
  info.cuda = MLO_WITH_CUDA != 0;
  return info;
}

}  // namespace mlo
