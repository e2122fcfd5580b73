#pragma once
/// \file
/// What built this copy of mlo: its version, the git commit it was built from, the LibTorch
/// it was compiled against and whether with CUDA (base layer). Runs record it in their
/// results, so that a number can be traced to the code that produced it.

#include <string>

namespace mlo {

/// The build's identity.
struct BuildInfo {
  std::string version;        ///< mlo's version, "0.1.0"
  /// The commit of the checkout at build time (40 hex digits, "-dirty" appended when tracked
  /// files had uncommitted changes), or "unknown" outside a git checkout.
  std::string git_commit;
  std::string torch_version;  ///< the LibTorch headers mlo was compiled with, e.g. "1.13.0"
  bool cuda = false;          ///< built with CUDA (MLO_WITH_CUDA)
};

/// This build's identity.
BuildInfo build_info();

}  // namespace mlo
