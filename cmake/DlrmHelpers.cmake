# Helpers so that every target is declared the same way (modelled on abseil's absl_cc_library).
#
#   dlrm_cc_library(NAME dlrm_dense SRCS a.cc b.cc DEPS dlrm_common OpenBLAS::OpenBLAS)
#   dlrm_cc_test(NAME dense_test SRCS tests/dense/x_test.cc DEPS dlrm_dense)
#   dlrm_cc_binary(NAME dlrm SRCS main.cc DEPS ...)

set(DLRM_WARNINGS -Wall -Wextra)

function(dlrm_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${ARG_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRM_WARNINGS}>)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

function(dlrm_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${DLRM_WARNINGS})
  # Denormals flushed to zero from the start (common/denormals.h) and uncaught exceptions named
  # (common/terminate_handler.h), OpenSSL kept until exit (common/openssl_exit.h); the objects need
  # dlrm_common.
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} dlrm_denormals_at_start
                        dlrm_terminate_handler_at_start dlrm_openssl_at_start dlrm_common)
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# One test binary per folder, registered test by test with gtest_discover_tests. COST (seconds,
# roughly, per test) makes `ctest -j` start these tests before cheaper ones when it has no timings
# of its own yet (a fresh clone, as in CI), so the long multi-process tests do not come last.
function(dlrm_cc_test)
  cmake_parse_arguments(ARG "BARE" "NAME;COST" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  # OpenSSL kept until exit, as in the dlrm executables (common/openssl_exit.h): a test that used
  # TLS could crash as it exited. BARE: without it, for the test of that start-up hook itself.
  if(NOT ARG_BARE)
    target_link_libraries(${ARG_NAME} PRIVATE dlrm_openssl_at_start dlrm_common)
  endif()
  # The code under test is in the libraries, built as the release is (-O3). The tests' own C++ is
  # built at -O1 in Release: it compiles in about half the time (gtest and gmock's templates are
  # most of it), and `make test` builds it all on every fresh clone.
  target_compile_options(${ARG_NAME} PRIVATE ${DLRM_WARNINGS}
                         $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  set(props ENVIRONMENT "DLRM_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
  if(ARG_LABELS)
    list(APPEND props LABELS "${ARG_LABELS}")
  endif()
  if(ARG_COST)
    list(APPEND props COST ${ARG_COST})
  endif()
  gtest_discover_tests(${ARG_NAME}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES ${props}
    DISCOVERY_TIMEOUT 60)
endfunction()
