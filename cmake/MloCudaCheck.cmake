# mlo_cuda_check: compiles every source that has CUDA-only code (`#if MLO_WITH_CUDA`) with CUDA
# on, as objects only (nothing is linked or run), so the GPU code paths are checked against the
# LibTorch API on a machine without a GPU or a CUDA LibTorch. Needs the CUDA toolkit's headers;
# scripts/cuda_check.sh configures and builds just this target.

# A function, so that MLO_WITH_CUDA=1 below stays local to the check.
function(mlo_add_cuda_check)
  # NOTE: the list is found, not written down: any new source that mentions MLO_WITH_CUDA (NCCL,
  # say) is covered the next time CMake configures.
  file(GLOB_RECURSE _mlo_candidates CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/*.cpp ${PROJECT_SOURCE_DIR}/problems/*.cpp)
  set(MLO_CUDA_CHECK_SOURCES "")
  foreach(_source IN LISTS _mlo_candidates)
    file(STRINGS ${_source} _hits REGEX "MLO_WITH_CUDA" LIMIT_COUNT 1)
    if(_hits)
      list(APPEND MLO_CUDA_CHECK_SOURCES ${_source})
    endif()
  endforeach()
  if(NOT MLO_CUDA_CHECK_SOURCES)
    message(FATAL_ERROR "mlo_cuda_check: no source mentions MLO_WITH_CUDA")
  endif()

  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "mlo_cuda_check needs the CUDA toolkit's headers (e.g. /usr/local/cuda); "
                        "set CUDAToolkit_ROOT to its folder")
  endif()

  # A build_config.h saying MLO_WITH_CUDA 1, in a folder searched before the build's own.
  set(_check_include ${PROJECT_BINARY_DIR}/cuda_check/include)
  set(MLO_WITH_CUDA 1)
  set(MLO_WITH_NCCL 1)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/build_config.h.in
                 ${_check_include}/mlo/build_config.h @ONLY)

  # NOTE: a CPU-only LibTorch (Debian's) ships the c10/cuda headers but not this one, which its
  # build generates; it only says whether c10_cuda is a shared library (it is).
  find_file(_mlo_cuda_macros c10/cuda/impl/cuda_cmake_macros.h
            PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH NO_CACHE)
  if(NOT _mlo_cuda_macros)
    file(WRITE ${_check_include}/c10/cuda/impl/cuda_cmake_macros.h
         "#pragma once\n// Stand-in written by cmake/MloCudaCheck.cmake.\n"
         "#define C10_CUDA_BUILD_SHARED_LIBS\n")
  endif()

  add_library(mlo_cuda_check OBJECT EXCLUDE_FROM_ALL ${MLO_CUDA_CHECK_SOURCES})
  target_include_directories(mlo_cuda_check BEFORE PRIVATE ${_check_include})
  target_include_directories(mlo_cuda_check PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src/cli)
  target_include_directories(mlo_cuda_check SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(mlo_cuda_check PRIVATE ${TORCH_LIBRARIES} spdlog::spdlog)
  # Warnings are errors here: the CUDA paths must compile as cleanly as the CPU ones, and
  # -Wundef catches a source that tests MLO_WITH_CUDA without including mlo/build_config.h.
  target_compile_options(mlo_cuda_check PRIVATE -Wall -Wextra -Wundef -Werror)

  string(REPLACE "${PROJECT_SOURCE_DIR}/" "" _shown "${MLO_CUDA_CHECK_SOURCES}")
  message(STATUS "mlo_cuda_check: CUDA ${CUDAToolkit_VERSION} headers; compiles ${_shown}")
endfunction()

mlo_add_cuda_check()
