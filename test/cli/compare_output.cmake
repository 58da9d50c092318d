# SPDX-License-Identifier: MIT
# Runs ${LINKD} seed-example and compares its stdout with ${GOLDEN}, byte for byte.
execute_process(COMMAND ${LINKD} seed-example OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "linkd seed-example exited ${rc}")
endif()
file(READ ${GOLDEN} want)
if(NOT out STREQUAL want)
  message(FATAL_ERROR "output differs from the seed:\n${out}\n--- want ---\n${want}")
endif()
