# Writes OUT, `#define STRETCH_BUILD_ID "<commit>"`, from `git describe` of the source tree SRC:
# the commit a build was made from (12 hex digits, or TAG-N-gHASH after a tag), with "-dirty"
# when tracked files differ from it. Run at every build (the target stretch_build_id); OUT is
# rewritten only when the text changes, so a new commit recompiles the one file that includes it
# (tools/cli/version.cc) and nothing else. Outside a git checkout (a tarball of the sources) the
# id says so.
execute_process(
  COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE id
  OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_QUIET
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR id STREQUAL "")
  set(id "unknown (not built from a git checkout)")
endif()
set(text "#define STRETCH_BUILD_ID \"${id}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
