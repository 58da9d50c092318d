# SPDX-License-Identifier: MIT
# Install rules: headers, both libraries, pkg-config files and a component-aware CMake package.
#   find_package(linkd COMPONENTS core)  linkd::core, linkd::core_static; never looks for curl
#   find_package(linkd COMPONENTS http)  also linkd::linkd, linkd::linkd_static (finds CURL)
#   find_package(linkd COMPONENTS outbox) also linkd::outbox, linkd::outbox_static (and http;
#                                        finds SQLite3)
#   find_package(linkd)                  every component this installation has
include(CMakePackageConfigHelpers)

# shared.h belongs to liblinkd-shared (src/shared), which is built in-tree only for now.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/linkd DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "shared.h" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/linkd/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linkd)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(LINKD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/linkd)
# One export set per component, so a core-only consumer never loads targets that refer to curl.
install(TARGETS linkd-core linkd-core_static EXPORT linkdCoreTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT linkdCoreTargets NAMESPACE linkd:: DESTINATION ${LINKD_CMAKE_DIR})
set(LINKD_PKG_COMPONENTS core)
if(LINKD_HTTP)
  install(TARGETS linkd linkd_static EXPORT linkdHttpTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT linkdHttpTargets NAMESPACE linkd:: DESTINATION ${LINKD_CMAKE_DIR})
  list(APPEND LINKD_PKG_COMPONENTS http)
endif()
if(TARGET linkd-outbox)
  install(TARGETS linkd-outbox linkd-outbox_static EXPORT linkdOutboxTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT linkdOutboxTargets NAMESPACE linkd:: DESTINATION ${LINKD_CMAKE_DIR})
  list(APPEND LINKD_PKG_COMPONENTS outbox)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/linkdConfig.cmake.in
  ${PROJECT_BINARY_DIR}/linkdConfig.cmake INSTALL_DESTINATION ${LINKD_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/linkdConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/linkdConfig.cmake ${PROJECT_BINARY_DIR}/linkdConfigVersion.cmake
        DESTINATION ${LINKD_CMAKE_DIR})

# pkg-config: paths relative to the .pc file (${pcfiledir}), so the tree stays relocatable, with
# as many ".." as CMAKE_INSTALL_LIBDIR/pkgconfig has components (lib/x86_64-linux-gnu: three).
# Absolute CMAKE_INSTALL_LIBDIR or INCLUDEDIR: absolute paths.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(LINKD_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(LINKD_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(LINKD_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  set(LINKD_PC_PREFIX "\${pcfiledir}/${up}")
  set(LINKD_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(LINKD_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(pcs linkd-core)
if(LINKD_HTTP)
  list(APPEND pcs linkd)
endif()
if(TARGET linkd-outbox)
  list(APPEND pcs linkd-outbox)
endif()
foreach(pc ${pcs})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
