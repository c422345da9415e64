# KILN_FUZZ: every Kiln target is compiled with libFuzzer's coverage instrumentation
# (fuzzer-no-link), AddressSanitizer and UBSan; the harnesses of tests/fuzz add -fsanitize=fuzzer
# (libFuzzer's main) themselves. Configure a separate build folder with clang, e.g.
#   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF
# (`make fuzz` does that). The flags go on kiln_flags, like KILN_SANITIZE's: never global.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR CMAKE_CXX_COMPILER_VERSION VERSION_LESS 14)
  message(FATAL_ERROR "KILN_FUZZ needs clang 14 or newer with libFuzzer (Debian: clang-14 and "
                      "libfuzzer-14-dev); configure with -DCMAKE_CXX_COMPILER=clang++-14")
endif()
if(KILN_SANITIZE)
  message(FATAL_ERROR "KILN_FUZZ brings its own sanitizers: leave KILN_SANITIZE off")
endif()
# -fno-sanitize-recover: a UBSan report aborts, so libFuzzer keeps the input as a crash.
target_compile_options(kiln_flags INTERFACE -fsanitize=fuzzer-no-link,address,undefined
                       -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
target_link_options(kiln_flags INTERFACE -fsanitize=address,undefined)
