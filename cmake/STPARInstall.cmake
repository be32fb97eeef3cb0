#===- STPARInstall.cmake - cmake --install and find_package(STPAR) ---------===#
#
# `cmake --install build --prefix PREFIX` installs:
#   bin/stpar, bin/stpar-opt             the driver and the opt tool
#   lib/lib*.a                           every stpar library
#   lib/STPARPlugin.so                   the plugin for stock mlir-opt-22
#   include/stpar/...                    public headers and generated .inc
#   share/stpar/runtime/                 the runtime headers emitted programs
#                                        build against
#   lib/cmake/stpar/STPARConfig.cmake    find_package(STPAR): imported targets
#                                        STPAR::<library>, STPAR_RUNTIME_DIR
#
#===------------------------------------------------------------------------===#

include(CMakePackageConfigHelpers)

get_property(STPAR_EXPORTED_LIBS GLOBAL PROPERTY STPAR_EXPORTED_LIBS)
install(TARGETS ${STPAR_EXPORTED_LIBS}
  EXPORT STPARTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS stpar stpar-opt stpar-translate
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/stpar
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.td")
install(DIRECTORY ${PROJECT_BINARY_DIR}/include/stpar
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.inc" PATTERN "*.h"
  PATTERN "CMakeFiles" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/stpar/runtime)

set(STPAR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stpar)
install(EXPORT STPARTargets
  NAMESPACE STPAR::
  DESTINATION ${STPAR_CMAKE_DIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/STPARConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/STPARConfig.cmake
  INSTALL_DESTINATION ${STPAR_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_DATADIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/STPARConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/STPARConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/STPARConfigVersion.cmake
  DESTINATION ${STPAR_CMAKE_DIR})
