# Installation (docs/install.md): the programs and presets (installed beside their targets in
# CMakeLists.txt), the public headers, the core library as the CMake package `commscope`
# (find_package(commscope) -> commscope::core), and the Debian package (`cpack -G DEB`).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/commscope DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev)

# The core library's include folder is the source tree's while building and include/ once
# installed.
set_target_properties(commscope_core PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES
  "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>;$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>"
  EXPORT_NAME core)
install(TARGETS commscope_core EXPORT commscopeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
set(COMMSCOPE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/commscope)
install(EXPORT commscopeTargets NAMESPACE commscope:: DESTINATION ${COMMSCOPE_CMAKE_DIR}
  COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/commscopeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/commscopeConfig.cmake INSTALL_DESTINATION ${COMMSCOPE_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/commscopeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/commscopeConfig.cmake
  ${PROJECT_BINARY_DIR}/commscopeConfigVersion.cmake DESTINATION ${COMMSCOPE_CMAKE_DIR}
  COMPONENT dev)

# ---- the Debian package: everything above under /usr ----
set(CPACK_PACKAGE_NAME commscope)
set(CPACK_PACKAGE_VENDOR "commscope")
set(CPACK_PACKAGE_CONTACT "commscope maintainers <commscope@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "where distributed LLM training time goes, what the network delivers, what it costs elsewhere")
set(CPACK_PACKAGE_DESCRIPTION
  "The commscope CLI (predict, analyze, validate, fit, describe), the MPI programs commscope-bench and commscope-train, the presets, the Python module and the C++ library with its CMake package.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)  # with CPACK_SET_DESTDIR, the prefix the package installs into
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The shared libraries the programs and the module link (libc, fmt, simdjson, zlib, toml++, Open MPI,
# OpenBLAS) by dpkg-shlibdeps; Python's ABI by hand: the module is built for this interpreter.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(DEFINED COMMSCOPE_PYTHON_VERSION_MINOR)
  set(_cs_py "${COMMSCOPE_PYTHON_VERSION_MAJOR}.${COMMSCOPE_PYTHON_VERSION_MINOR}")
  math(EXPR _cs_next_minor "${COMMSCOPE_PYTHON_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "python3 (>= ${_cs_py}~), python3 (<< ${COMMSCOPE_PYTHON_VERSION_MAJOR}.${_cs_next_minor})")
endif()
# mpirun for bench/train; the headers' own dependencies for find_package(commscope).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "openmpi-bin, python3-numpy, python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
  "cmake, g++, libfmt-dev, nlohmann-json3-dev, libsimdjson-dev, zlib1g-dev, libtomlplusplus-dev, python3-pandas")
include(CPack)
