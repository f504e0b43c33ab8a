# torch_free_library(): a torch-free static library of the project (runtime/,
# kernels/, later compiler/ and collectives/) with its GoogleTest suite and
# its sanitizer option, built the same way whether the folder is configured
# on its own (cmake -S runtime) or through the top-level project.
#
#   torch_free_library(<name>
#     SOURCES <src>...              the library's sources
#     [OBJECT_LIBRARIES <target>...] object libraries compiled into it (they
#                                    get the sanitizer flags too)
#     [COMPILE_OPTIONS <opt>...]     PRIVATE options of the library
#     [LINK_LIBRARIES <lib>...]      PUBLIC link dependencies
#     [TEST_SOURCES <src>...]        the gtest suite, target <name>_tests
#     [TEST_INCLUDE_DIRS <dir>...]   extra include folders of the suite
#     [TEST_LINK_LIBRARIES <lib>...])
#
# Options, named after the library (upper case) so that a script can derive
# them from the name (scripts/test.sh does):
#   <NAME>_BUILD_TESTS  build <name>_tests (ON when the folder is the
#                       top-level project, OFF under add_subdirectory)
#   <NAME>_SANITIZE     "", "address;undefined" or "thread"; applied PUBLIC,
#                       so whatever links the library (its tests, the torch
#                       extension) gets the matching sanitizer runtime.
# The library has its public headers in include/, alias <name>::<name>. The
# caller registers the suite's tests with ctest (enable_testing() and
# gtest_discover_tests in its own scope: enable_testing has no effect inside
# a function), since how they run differs per library; the suite target
# exists only when <NAME>_BUILD_TESTS.
# At file scope: GoogleTest's gtest_discover_tests finds its helper script
# through a variable this include sets in the including scope.
include(GoogleTest)

function(torch_free_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg ""  ""
    "SOURCES;OBJECT_LIBRARIES;COMPILE_OPTIONS;LINK_LIBRARIES;TEST_SOURCES;TEST_INCLUDE_DIRS;TEST_LINK_LIBRARIES")
  string(TOUPPER "${name}" prefix)
  if(CMAKE_SOURCE_DIR STREQUAL CMAKE_CURRENT_SOURCE_DIR)
    set(top_level ON)
  else()
    set(top_level OFF)
  endif()
  option(${prefix}_BUILD_TESTS "Build the ${name} GoogleTest suite" ${top_level})
  set(${prefix}_SANITIZE "" CACHE STRING
      "Sanitizers for ${name} and its tests: empty, \"address;undefined\" or \"thread\"")
  if(top_level AND NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
  endif()

  set(objects)
  foreach(lib IN LISTS arg_OBJECT_LIBRARIES)
    list(APPEND objects $<TARGET_OBJECTS:${lib}>)
  endforeach()
  add_library(${name} STATIC ${arg_SOURCES} ${objects})
  add_library(${name}::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_compile_features(${name} PUBLIC cxx_std_20)
  set_target_properties(${name} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${name} PRIVATE ${arg_COMPILE_OPTIONS})
  target_link_libraries(${name} PUBLIC ${arg_LINK_LIBRARIES})

  set(sanitize "${${prefix}_SANITIZE}")
  if(sanitize)
    string(REPLACE ";" "," san_list "${sanitize}")
    if(NOT san_list MATCHES "^(address|undefined|thread)(,(address|undefined|thread))*$")
      message(FATAL_ERROR "${prefix}_SANITIZE='${sanitize}': expected \"address;undefined\" or \"thread\"")
    endif()
    if(san_list MATCHES "thread" AND san_list MATCHES "address")
      message(FATAL_ERROR "${prefix}_SANITIZE: thread and address sanitizers cannot be combined")
    endif()
    set(san_flags -fsanitize=${san_list} -fno-omit-frame-pointer)
    if(san_list MATCHES "undefined")
      list(APPEND san_flags -fno-sanitize-recover=undefined)
    endif()
    foreach(target ${name} ${arg_OBJECT_LIBRARIES})
      target_compile_options(${target} PUBLIC ${san_flags})
    endforeach()
    target_link_options(${name} PUBLIC -fsanitize=${san_list})
    message(STATUS "${name}: sanitizers ${san_list}")
  endif()

  if(${prefix}_BUILD_TESTS AND arg_TEST_SOURCES)
    find_package(GTest REQUIRED)
    add_executable(${name}_tests ${arg_TEST_SOURCES})
    target_include_directories(${name}_tests PRIVATE ${arg_TEST_INCLUDE_DIRS})
    target_compile_options(${name}_tests PRIVATE -Wall -Wextra)
    target_link_libraries(${name}_tests PRIVATE ${name} GTest::gtest ${arg_TEST_LINK_LIBRARIES})
  endif()
endfunction()
