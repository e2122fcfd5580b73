// The main of the [cuda] tests. Where LibTorch sees no GPU they cannot run: the program says
// why, lists the cases it did not run, and exits 77, which CTest reports as "Skipped"
// (SKIP_RETURN_CODE in tests/cuda/CMakeLists.txt) with this output in its log.
#define CATCH_CONFIG_RUNNER
#include <mlo/build_config.h>

#include <torch/cuda.h>

#include <catch2/catch.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  Catch::Session session;
  if (!torch::cuda::is_available()) {
    std::printf("skipped: %s; the [cuda] cases, none of them run:\n",
                MLO_WITH_CUDA ? "no CUDA device is visible to LibTorch (no NVIDIA GPU or driver, "
                                "or CUDA_VISIBLE_DEVICES hides them)"
                              : "this mlo was built against a LibTorch without CUDA");
    std::fflush(stdout);
    const char* list[] = {argv[0], "--list-test-names-only", "[cuda]"};
    if (session.applyCommandLine(3, list) != 0) return 1;
    session.run();
    return 77;
  }
  return session.run(argc, argv);
}
