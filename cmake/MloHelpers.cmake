# Helpers shared by every directory: one way to add a program that uses mlo.

# mlo_add_program(NAME [CORE] SOURCES...): an executable linked to mlo::mlo (the core and the run
# layer), or with CORE to mlo::core only, reusing the precompiled header.
function(mlo_add_program name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "CORE" "" "")
  add_executable(${name} ${arg_UNPARSED_ARGUMENTS})
  if(arg_CORE)
    target_link_libraries(${name} PRIVATE mlo::core)
  else()
    target_link_libraries(${name} PRIVATE mlo::mlo)
  endif()
  target_compile_options(${name} PRIVATE -Wall -Wextra -Winvalid-pch)
  if(MLO_USE_PCH)
    # The shared header was compiled with -fPIC; compile the program the same way (it still
    # links as a PIE) so that GCC accepts the precompiled header.
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE -fPIC)
    target_precompile_headers(${name} REUSE_FROM mlo_pch)
  endif()
endfunction()
