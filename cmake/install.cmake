# SPDX-License-Identifier: MIT
# Install rules: headers, both libraries, pkg-config files and a component-aware CMake package.
#   find_package(linkd COMPONENTS core)  linkd::core, linkd::core_static; never looks for curl
#   find_package(linkd COMPONENTS http)  also linkd::linkd, linkd::linkd_static (finds CURL)
#   find_package(linkd COMPONENTS outbox) also linkd::outbox, linkd::outbox_static (and http;
#                                        finds SQLite3)
#   find_package(linkd)                  every component this installation has
include(CMakePackageConfigHelpers)

# Headers: those of the libraries this build installs, and no others. Every header not named
# here is liblinkd-core's. shared.h belongs to liblinkd-shared (src/shared), which is built
# in-tree only for now (docs/shared.md) and is never installed.
set(linkd_http_headers http.h idem.h)
set(linkd_outbox_headers outbox.h)
file(GLOB linkd_headers RELATIVE ${PROJECT_SOURCE_DIR}/include/linkd
     ${PROJECT_SOURCE_DIR}/include/linkd/*.h)
list(REMOVE_ITEM linkd_headers shared.h linkd.h)
if(NOT LINKD_HTTP)
  list(REMOVE_ITEM linkd_headers ${linkd_http_headers})
endif()
if(NOT TARGET linkd-outbox)
  list(REMOVE_ITEM linkd_headers ${linkd_outbox_headers})
endif()
list(TRANSFORM linkd_headers PREPEND ${PROJECT_SOURCE_DIR}/include/linkd/
     OUTPUT_VARIABLE linkd_header_paths)
install(FILES ${linkd_header_paths} ${PROJECT_BINARY_DIR}/include/linkd/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linkd)
list(APPEND linkd_headers version.h)
# The umbrella linkd.h includes every header of this installation: the source file as it is
# when all it includes is installed, else a copy without the #include lines of the headers left
# out (LINKD_HTTP=OFF: http.h and idem.h), so that <linkd/linkd.h> compiles wherever it is
# installed and means "all of linkd that is here".
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${PROJECT_SOURCE_DIR}/include/linkd/linkd.h)
file(READ ${PROJECT_SOURCE_DIR}/include/linkd/linkd.h linkd_umbrella)
set(linkd_umbrella_in "${linkd_umbrella}")
string(REGEX MATCHALL "#include <linkd/[a-z0-9_]+\\.h>" linkd_umbrella_includes
       "${linkd_umbrella}")
foreach(inc ${linkd_umbrella_includes})
  string(REGEX REPLACE "^#include <linkd/(.*)>$" "\\1" h "${inc}")
  if(NOT h IN_LIST linkd_headers)
    string(REPLACE "${inc}\n" "" linkd_umbrella "${linkd_umbrella}")
  endif()
endforeach()
if(linkd_umbrella STREQUAL linkd_umbrella_in)
  install(FILES ${PROJECT_SOURCE_DIR}/include/linkd/linkd.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linkd)
else()
  string(REPLACE "#ifndef LINKD_LINKD_H" "/* As installed by a build without some of linkd's \
libraries: the headers of those are not\n * installed, and neither are their #include lines \
here. */\n#ifndef LINKD_LINKD_H" linkd_umbrella "${linkd_umbrella}")
  file(WRITE ${PROJECT_BINARY_DIR}/install/linkd.h.tmp "${linkd_umbrella}")
  configure_file(${PROJECT_BINARY_DIR}/install/linkd.h.tmp
                 ${PROJECT_BINARY_DIR}/install/linkd/linkd.h COPYONLY)
  install(FILES ${PROJECT_BINARY_DIR}/install/linkd/linkd.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linkd)
endif()
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
  # liblinkd-outbox.so needs liblinkd.so.0, which sits beside it. A program linked with
  # --as-needed (Debian's gcc default) that calls only lk_outbox_* does not list liblinkd.so.0
  # itself, so in a prefix the loader does not search the library must say where: RUNPATH
  # $ORIGIN. Not in a directory the toolchain searches anyway (/usr/lib/<multiarch>, distribution
  # packages), where it would change nothing and packaging checks flag it.
  set(linkd_system_libdirs ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES}
      ${CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES})
  if(NOT CMAKE_INSTALL_FULL_LIBDIR IN_LIST linkd_system_libdirs)
    get_target_property(rpath linkd-outbox INSTALL_RPATH) # CMAKE_INSTALL_RPATH, if any
    if(rpath)
      set(rpath "\$ORIGIN" ${rpath})
    else()
      set(rpath "\$ORIGIN")
    endif()
    set_target_properties(linkd-outbox PROPERTIES INSTALL_RPATH "${rpath}")
  endif()
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
