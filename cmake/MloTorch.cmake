# What the LibTorch that find_package(Torch) found brings, and what it needs around it. Two lanes
# build mlo: Debian's LibTorch 1.13 (CPU, with Gloo) and a PyPI wheel's LibTorch 2.x (CUDA;
# scripts/setup.sh --torch2). Sets MLO_WITH_CUDA, MLO_WITH_GLOO, MLO_WITH_NCCL and
# MLO_TORCH_EXTRA_INCLUDES (folders every target must search before LibTorch's) and
# MLO_TORCH_LINK_OPTIONS (for everything that links LibTorch) and MLO_TORCH_LINK_LIBRARIES (what
# links LibTorch, in the order that matters).

set(MLO_TORCH_EXTRA_INCLUDES "")

# Its libraries must be the ones beside its headers. TorchConfig's find_library searches the
# system folders before the wheel's own, so with Debian's libtorch-dev also installed a wheel's
# headers would be linked against Debian's libraries.
if(EXISTS "${TORCH_INSTALL_PREFIX}/lib/libtorch.so")
  get_filename_component(_mlo_found "${TORCH_LIBRARY}" REALPATH)
  get_filename_component(_mlo_beside "${TORCH_INSTALL_PREFIX}/lib/libtorch.so" REALPATH)
  if(NOT _mlo_found STREQUAL _mlo_beside)
    message(FATAL_ERROR
      "mlo: LibTorch's headers are from ${TORCH_INSTALL_PREFIX} but libtorch.so is "
      "${TORCH_LIBRARY}: add ${TORCH_INSTALL_PREFIX} to CMAKE_PREFIX_PATH (after its "
      "share/cmake), in a fresh build folder")
  endif()
endif()

# CUDA support follows the LibTorch: a CUDA LibTorch defines its CUDA libraries.
if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(MLO_WITH_CUDA 1)
else()
  set(MLO_WITH_CUDA 0)
endif()

# Gloo (CPU data parallelism) needs Gloo's headers of the very version LibTorch was built with.
# Debian builds its LibTorch against its own libgloo-dev; a PyPI wheel bundles Gloo in its
# libraries but ships no Gloo headers, and Debian's are another version: never mix them.
if(Torch_VERSION VERSION_LESS 2)
  find_path(MLO_GLOO_INCLUDE gloo/algorithm.h)
else()
  find_path(MLO_GLOO_INCLUDE gloo/algorithm.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
endif()
if(MLO_GLOO_INCLUDE)
  set(MLO_WITH_GLOO 1)
else()
  set(MLO_WITH_GLOO 0)
endif()

# NCCL (CUDA data parallelism): nccl.h from the wheel's own nvidia-nccl package, else the CUDA
# toolkit's.
set(MLO_WITH_NCCL 0)
if(MLO_WITH_CUDA)
  file(GLOB _mlo_nccl_hints "${TORCH_INSTALL_PREFIX}/../nvidia/nccl*/include"
                            "${TORCH_INSTALL_PREFIX}/../nvidia/cu*/include")
  find_path(MLO_NCCL_INCLUDE nccl.h PATHS ${_mlo_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            NO_DEFAULT_PATH)
  if(MLO_NCCL_INCLUDE)
    set(MLO_WITH_NCCL 1)
    list(APPEND MLO_TORCH_EXTRA_INCLUDES ${MLO_NCCL_INCLUDE})
  endif()
endif()

# A wheel's CUDA libraries find their NCCL, cuDNN, ... in the wheel's nvidia/ packages (their
# RPATH); the linker must look there first too, before the CUDA toolkit's older copies.
set(MLO_TORCH_LINK_OPTIONS "")
if(MLO_WITH_CUDA)
  file(GLOB _mlo_wheel_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  foreach(_dir IN LISTS _mlo_wheel_libs)
    get_filename_component(_dir "${_dir}" REALPATH)
    list(APPEND MLO_TORCH_LINK_OPTIONS "LINKER:-rpath-link,${_dir}")
  endforeach()
endif()

# A wheel bundles {fmt} headers (a newer version than Debian's) in its include folder, where
# they would shadow the {fmt} that Debian's spdlog was built with: every target searches a
# folder holding only spdlog's {fmt} first.
if(EXISTS "${TORCH_INSTALL_PREFIX}/include/fmt")
  find_package(fmt CONFIG REQUIRED)
  get_target_property(_mlo_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  find_path(_mlo_fmt_root fmt/format.h PATHS ${_mlo_fmt_dirs} NO_DEFAULT_PATH NO_CACHE)
  if(NOT _mlo_fmt_root)
    set(_mlo_fmt_root /usr/include)
  endif()
  set(_mlo_shim ${PROJECT_BINARY_DIR}/spdlog_fmt)
  file(MAKE_DIRECTORY ${_mlo_shim})
  file(CREATE_LINK ${_mlo_fmt_root}/fmt ${_mlo_shim}/fmt SYMBOLIC)
  list(APPEND MLO_TORCH_EXTRA_INCLUDES ${_mlo_shim})
endif()

# A wheel's libtorch_cpu.so carries, and exports, its own copy of libstdc++'s std::filesystem
# (built into it by the older compiler that built the wheel). Where it comes before libstdc++.so.6
# in a program's list of needed libraries, the dynamic linker binds the program's
# std::filesystem::remove_all and the rest to that copy. Built with GCC 13 against PyTorch
# 2.11's wheel, five tests crashed right after their last check, where they remove their scratch
# folders, and all pass with libstdc++ first (a ten-line remove_all program did not crash either
# way: the copy is not always wrong, only not the one the headers were written for). libstdc++
# named before LibTorch is searched first, so programs get the system's own implementation.
set(MLO_TORCH_LINK_LIBRARIES ${TORCH_LIBRARIES})
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang" AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
  list(PREPEND MLO_TORCH_LINK_LIBRARIES stdc++)
endif()

message(STATUS "mlo: LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX}), CUDA support: "
               "${MLO_WITH_CUDA}, Gloo: ${MLO_WITH_GLOO}, NCCL: ${MLO_WITH_NCCL}")
