# SPDX-License-Identifier: MIT
# Fails unless `e2e.py --list` prints exactly the cases in ${WANT} (a CMake list), in order.
execute_process(COMMAND ${PYTHON} ${SCRIPT} --list OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "e2e.py --list exited ${rc}")
endif()
string(STRIP "${out}" out)
string(REPLACE "\n" ";" have "${out}")
if(NOT have STREQUAL WANT)
  message(FATAL_ERROR "test/cli/CMakeLists.txt lists:\n  ${WANT}\ne2e.py has:\n  ${have}")
endif()
