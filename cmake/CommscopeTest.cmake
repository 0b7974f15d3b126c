# One helper registers every test with its label (unit, mpi, slow) and, for MPI tests,
# its rank count. MPI tests get the root/oversubscribe environment CI needs.
find_package(GTest REQUIRED)
include(GoogleTest)

# The test code itself at -O1 (after the build type's -O3, so it wins): what a test computes
# runs in the libraries, which keep the build type's flags, and GCC compiles gtest's macro-heavy
# test bodies about 40% faster so (timeline_trace_test.cpp: 18.3 s at -O3, 11.0 s at -O1). The
# test files are most of a fresh build's compile time (docs/CONTRIBUTING.md, "Build time").
function(commscope_test_code_flags target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O1>)
endfunction()

# commscope_add_gtest(NAME <name> SOURCES <files...> LABEL unit|mpi|slow [RANKS n])
function(commscope_add_gtest)
  cmake_parse_arguments(T "" "NAME;LABEL;RANKS" "SOURCES" ${ARGN})
  if(NOT T_LABEL MATCHES "^(unit|mpi|slow)$")
    message(FATAL_ERROR "commscope_add_gtest(${T_NAME}): LABEL must be unit, mpi or slow, got '${T_LABEL}'")
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE commscope::core GTest::gtest GTest::gtest_main)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  commscope_test_code_flags(${T_NAME})
  target_compile_definitions(${T_NAME} PRIVATE
    COMMSCOPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(${T_NAME}
    PROPERTIES LABELS ${T_LABEL}
    ENVIRONMENT "COMMSCOPE_PRESETS=${PROJECT_SOURCE_DIR}/presets"
    DISCOVERY_TIMEOUT 30)
endfunction()
