# Install rules and the CMake package config, so another project can `find_package(mlo)`:
#
#   find_package(mlo REQUIRED)          # also finds the LibTorch mlo was built against
#   target_link_libraries(app PRIVATE mlo::core)  # problems, engine, runs: LibTorch only
#   target_link_libraries(app PRIVATE mlo::mlo)   # and YAML experiments, datasets, downloads
#   target_link_libraries(app PRIVATE mlo::cli)   # the `mlo` command line: mlo::cli::main
#
# spdlog, CLI11, nlohmann_json, yaml-cpp, libcurl, OpenSSL and libarchive are PRIVATE
# dependencies of the shared libraries and are not needed by consumers.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Consumers compile mlo's headers, which need C++17.
target_compile_features(mlo_core PUBLIC cxx_std_17)
# The installed libraries keep the paths of the libraries they link that are outside the system
# directories (e.g. a LibTorch 2.x unpacked under /opt), so they load without LD_LIBRARY_PATH,
# and find each other beside them ($ORIGIN).
set_target_properties(mlo_core mlo_run PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE
  INSTALL_RPATH "$ORIGIN")
# NOTE: CMake leaves out link folders inside the project, and the 2.x lane's LibTorch lives in
# the checkout's .venv/: name LibTorch's own folder (outside the system paths) explicitly.
if(EXISTS "${TORCH_INSTALL_PREFIX}/lib" AND NOT TORCH_INSTALL_PREFIX MATCHES "^/usr(/|$)")
  set_property(TARGET mlo_core mlo_run mlo_cli APPEND PROPERTY INSTALL_RPATH
    "${TORCH_INSTALL_PREFIX}/lib")
endif()
set_target_properties(mlo_core PROPERTIES EXPORT_NAME core)
set_target_properties(mlo_run PROPERTIES EXPORT_NAME run)

install(TARGETS mlo_core mlo_run mlo mlo_cli EXPORT mloTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/mlo DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/mlo/build_config.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mlo)
# Ready-made problems keep their in-tree include path: #include "problems/hpo/logreg.h".
install(DIRECTORY problems DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mlo
  FILES_MATCHING PATTERN "*.h")

# The package config records the LibTorch this build used, as a hint for consumers.
set(MLO_TORCH_DIR "${Torch_DIR}")
set(MLO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlo)
install(EXPORT mloTargets NAMESPACE mlo:: DESTINATION ${MLO_CMAKE_DIR})
configure_package_config_file(cmake/mloConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mloConfig.cmake INSTALL_DESTINATION ${MLO_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mloConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mloConfig.cmake ${PROJECT_BINARY_DIR}/mloConfigVersion.cmake
  DESTINATION ${MLO_CMAKE_DIR})
