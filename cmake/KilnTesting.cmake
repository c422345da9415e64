# kiln_add_test(NAME SOURCES a.cc b.cc LABELS unit kernels [DEPS extra targets])
# One GoogleTest binary registered with ctest under the given labels.
find_package(GTest REQUIRED)
include(GoogleTest)

function(kiln_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LABELS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kiln_testing GTest::gtest GTest::gtest_main GTest::gmock
                        ${ARG_DEPS})
  # Labels are set by a second include file, run after the discovered tests are added: passing
  # a list through gtest_discover_tests(PROPERTIES LABELS ...) splits "unit;import" into
  # LABELS unit plus a bogus property "import", so `ctest -L import` found nothing.
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    TEST_LIST ${name}_TESTS
    DISCOVERY_TIMEOUT 60)
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake")
  file(WRITE "${labels_file}"
    "foreach(t IN LISTS ${name}_TESTS)\n"
    "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARG_LABELS}\")\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
endfunction()
