# Install rules (PTREAD_INSTALL, default: ptread is the top-level project): the headers, a CMake
# package (find_package(ptread CONFIG)), ptread.pc for pkg-config, and the ptread tool when it
# is built. Header-only, so the package files go under the arch-independent datadir.
include(CMakePackageConfigHelpers)

set(PTREAD_CMAKE_DIR ${CMAKE_INSTALL_DATADIR}/cmake/ptread)
set(PTREAD_PKGCONFIG_DIR ${CMAKE_INSTALL_DATADIR}/pkgconfig)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ptread DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ptread EXPORT ptreadTargets)
install(EXPORT ptreadTargets NAMESPACE ptread:: DESTINATION ${PTREAD_CMAKE_DIR})
if(TARGET ptread_cli)
  install(TARGETS ptread_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ptreadConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ptreadConfig.cmake INSTALL_DESTINATION ${PTREAD_CMAKE_DIR})
# 0.x: a minor release may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ptreadConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/ptreadConfig.cmake ${PROJECT_BINARY_DIR}/ptreadConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/ptreadBackends.cmake
        DESTINATION ${PTREAD_CMAKE_DIR})

# ptread.pc finds the prefix from its own place (${pcfiledir}), so `cmake --install --prefix`
# anywhere gives a working file.
file(RELATIVE_PATH PTREAD_PC_PREFIX_FROM_PCDIR ${CMAKE_INSTALL_FULL_DATADIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" PTREAD_PC_PREFIX_FROM_PCDIR "${PTREAD_PC_PREFIX_FROM_PCDIR}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(PTREAD_PC_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
else()
  set(PTREAD_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(PTREAD_PC_REQUIRES "")
set(PTREAD_PC_CFLAGS "")
if(PTREAD_WITH_ZLIB)
  set(PTREAD_PC_REQUIRES zlib)
  set(PTREAD_PC_CFLAGS " -DPTREAD_WITH_ZLIB=1")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/ptread.pc.in ${PROJECT_BINARY_DIR}/ptread.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ptread.pc DESTINATION ${PTREAD_PKGCONFIG_DIR})
