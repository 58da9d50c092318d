# SPDX-License-Identifier: MIT
# On CMAKE_MODULE_PATH in the tests where nothing may look for curl: any find_package(CURL) fails.
message(FATAL_ERROR "find_package(CURL) was called, but this consumer must not need curl")
