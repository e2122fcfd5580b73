# Script mode (cmake -P), run at every build: writes the checkout's commit into OUT, a header,
# rewriting it only when the text changes (configure_file), so an unchanged commit rebuilds
# nothing. Inputs: SOURCE_DIR, OUT. Outside a git checkout (a release tarball) the commit is
# "unknown"; uncommitted changes to tracked files add "-dirty".
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse HEAD
    OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE failed ERROR_QUIET)
  if(NOT failed AND head)
    set(commit "${head}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} status --porcelain
      --untracked-files=no
      OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(changes)
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
set(MLO_GIT_COMMIT "${commit}")
file(WRITE ${OUT}.in "#pragma once\n// Generated at build time by cmake/git_commit.cmake.\n#define MLO_GIT_COMMIT \"@MLO_GIT_COMMIT@\"\n")
configure_file(${OUT}.in ${OUT} @ONLY)
