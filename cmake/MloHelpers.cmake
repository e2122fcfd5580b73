# Helpers shared by every directory: one way to add a program that uses mlo.

# mlo_add_program(NAME SOURCES...): an executable linked to mlo, reusing the precompiled header.
function(mlo_add_program name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE mlo::mlo)
  target_compile_options(${name} PRIVATE -Wall -Wextra -Winvalid-pch)
  if(MLO_USE_PCH)
    # The shared header was compiled with -fPIC; compile the program the same way (it still
    # links as a PIE) so that GCC accepts the precompiled header.
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE -fPIC)
    target_precompile_headers(${name} REUSE_FROM mlo_pch)
  endif()
endfunction()
