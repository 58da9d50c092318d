# SPDX-License-Identifier: MIT
# cmake -DCOMPILER=... -DEXT=c|cpp -DFLAGS="..." -DINCLUDE_DIR=... -DGENERATED_INCLUDE_DIR=...
#       -DWORK_DIR=... -P check_headers.cmake
# Compiles one translation unit per public header, then one with <linkd/linkd.h> and a use of it,
# and fails on the first diagnostic. The header list is read from the source tree when the test
# runs, so a new header is checked without editing a list.
if(NOT COMPILER OR NOT EXISTS "${COMPILER}")
  message(FATAL_ERROR "compiler not found: '${COMPILER}'")
endif()
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

file(GLOB headers RELATIVE "${INCLUDE_DIR}/linkd" "${INCLUDE_DIR}/linkd/*.h")
list(APPEND headers version.h)
list(LENGTH headers n)
if(n LESS 10)
  message(FATAL_ERROR "only ${n} headers found under ${INCLUDE_DIR}/linkd")
endif()

set(units)
foreach(h ${headers})
  string(REPLACE "." "_" stem "${h}")
  # Twice: the include guard must work.
  file(WRITE "${WORK_DIR}/${stem}.${EXT}" "#include <linkd/${h}>\n#include <linkd/${h}>\n")
  list(APPEND units "${WORK_DIR}/${stem}.${EXT}")
endforeach()
# The umbrella header, with a call through it so the declarations are used, not only parsed.
file(WRITE "${WORK_DIR}/umbrella.${EXT}" [=[
#include <linkd/linkd.h>
#include <linkd/seed_example.h>

int main(void) {
  char buf[512];
  int64_t ns = 0;
  if (lk_ms_timeout_parse("250", 3, &ns) != LK_OK || ns != LK_MS(250))
    return 1;
  return lk_seed_example(buf, sizeof buf) < 0 || lk_clock_system() == NULL;
}
]=])
list(APPEND units "${WORK_DIR}/umbrella.${EXT}")

foreach(u ${units})
  execute_process(
    COMMAND "${COMPILER}" ${flags} -I "${INCLUDE_DIR}" -I "${GENERATED_INCLUDE_DIR}" -c "${u}"
            -o "${u}.o"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${COMPILER} ${FLAGS}: ${u} does not compile:\n${out}")
  endif()
endforeach()
message(STATUS "${COMPILER} ${FLAGS}: ${n} headers and the umbrella compile")
