# kiln_add_test(NAME SOURCES a.cc b.cc LABELS unit kernels [DEPS extra targets])
# One GoogleTest binary registered with ctest under the given labels.
find_package(GTest REQUIRED)
include(GoogleTest)

function(kiln_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LABELS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kiln_testing GTest::gtest GTest::gtest_main GTest::gmock
                        ${ARG_DEPS})
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${ARG_LABELS}"
    DISCOVERY_TIMEOUT 60)
endfunction()
