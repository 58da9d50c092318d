# SPDX-License-Identifier: MIT
# On CMAKE_MODULE_PATH in the tests where nothing may look for SQLite (the outbox's dependency):
# any find_package(SQLite3) fails.
message(FATAL_ERROR "find_package(SQLite3) was called, but this consumer must not need SQLite")
