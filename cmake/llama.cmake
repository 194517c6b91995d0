# The pinned llama.cpp, obtained and built by scripts/ into a cache outside the source tree, and
# imported here as targets:
#   llama::llama    libllama (llama.h)           llama::common  llama.cpp's common library
#   llama::ggml     ggml + gguf (ggml*.h, gguf.h) llama::rpc     ggml's RPC backend (ggml-rpc.h)
# and the baseline executables LLAMA_SERVER_EXE, LLAMA_RPC_SERVER_EXE, LLAMA_BENCH_EXE.

set(TANDEM_LLAMA_TAG "v0.5.0")
set(TANDEM_LLAMA_PINNED_COMMIT "de3ff815ea7d559ee917f063901b8986f038abc6")

set(_env_source "$ENV{TANDEM_LLAMA_SOURCE}")
set(TANDEM_LLAMA_SOURCE "${_env_source}" CACHE PATH
    "Build against this llama.cpp checkout instead of the pinned one (also: env TANDEM_LLAMA_SOURCE)")
# CUDA: AUTO (the default; also env TANDEM_CUDA) builds llama.cpp's CUDA backend when an nvcc is
# found (PATH, CUDACXX, CUDA_HOME, /usr/local/cuda/bin) and an NVIDIA GPU is visible or
# CMAKE_CUDA_ARCHITECTURES is given; ON insists, OFF is the CPU only. scripts/cuda-config.sh decides
# and picks the GPU's architecture (GB10: 121a-real) unless CMAKE_CUDA_ARCHITECTURES says otherwise.
set(_cuda_default AUTO)
if(DEFINED ENV{TANDEM_CUDA} AND NOT "$ENV{TANDEM_CUDA}" STREQUAL "")
  set(_cuda_default "$ENV{TANDEM_CUDA}")
endif()
set(TANDEM_CUDA "${_cuda_default}" CACHE STRING "Build llama.cpp's CUDA backend: AUTO, ON or OFF")
set_property(CACHE TANDEM_CUDA PROPERTY STRINGS AUTO ON OFF)

set(_obtain_env "")
if(TANDEM_LLAMA_SOURCE)
  set(_obtain_env "TANDEM_LLAMA_SOURCE=${TANDEM_LLAMA_SOURCE}")
endif()
execute_process(
  COMMAND env ${_obtain_env} ${PROJECT_SOURCE_DIR}/scripts/obtain-llama.sh
  OUTPUT_VARIABLE LLAMA_SOURCE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "Could not obtain llama.cpp (see the message above).")
endif()

set(_cuda_query --cuda "${TANDEM_CUDA}")
if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  # Passed with ',' between architectures: a ';' would split the argument here.
  string(REPLACE ";" "," _arch_arg "${CMAKE_CUDA_ARCHITECTURES}")
  list(APPEND _cuda_query --arch "${_arch_arg}")
endif()
if(CMAKE_CUDA_COMPILER)
  list(APPEND _cuda_query --nvcc "${CMAKE_CUDA_COMPILER}")
endif()
execute_process(
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/cuda-config.sh ${_cuda_query}
  OUTPUT_VARIABLE _cuda_out RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "CUDA was asked for and cannot be built (see the message above).")
endif()
foreach(_k cuda nvcc arch why)
  string(REGEX MATCH "(^|\n)${_k}=([^\n]*)" _m "${_cuda_out}")
  set(_cuda_${_k} "${CMAKE_MATCH_2}")
endforeach()
message(STATUS "llama.cpp backend: ${_cuda_why}")
set(TANDEM_CUDA_ENABLED ${_cuda_cuda})
set(_build_args ${LLAMA_SOURCE_DIR} --cuda ${_cuda_cuda})
if(_cuda_cuda STREQUAL "ON")
  list(APPEND _build_args --cuda-arch "${_cuda_arch}" --nvcc "${_cuda_nvcc}")
endif()
# A cross build (CMAKE_TOOLCHAIN_FILE, e.g. cmake/aarch64-linux-gnu.cmake): llama.cpp is built with
# the same toolchain, CPU only, for TANDEM_ARM_ARCH (ggml's GGML_CPU_ARM_ARCH, -march=) rather than
# for this host's CPU. The default is GB10's cores (Cortex-X925 + A725, Armv9.2-A): armv9-a (SVE2,
# dotprod) + i8mm + bf16, as far as GCC 12 names them (it knows no armv9.2-a).
set(TANDEM_ARM_ARCH "armv9-a+i8mm+bf16" CACHE STRING
    "Cross builds for ARM: the -march that llama.cpp's CPU backend is built for")
if(CMAKE_CROSSCOMPILING)
  if(_cuda_cuda STREQUAL "ON")
    message(FATAL_ERROR "A cross build is CPU only: configure it with -DTANDEM_CUDA=OFF.")
  endif()
  list(APPEND _build_args --toolchain "${CMAKE_TOOLCHAIN_FILE}")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|arm)")
    list(APPEND _build_args --arm-arch "${TANDEM_ARM_ARCH}")
  endif()
endif()
# The build folder's key comes from these scripts' output: configure again when they change, or an
# existing build tree would keep linking the llama.cpp build of the old options.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/scripts/build-llama.sh ${PROJECT_SOURCE_DIR}/scripts/cpu-features.sh
  ${PROJECT_SOURCE_DIR}/scripts/cpu-probe.c ${PROJECT_SOURCE_DIR}/scripts/cuda-config.sh)
execute_process(
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/build-llama.sh ${_build_args} --configure-only
  OUTPUT_VARIABLE LLAMA_BUILD_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "Could not configure llama.cpp (see the message above).")
endif()
message(STATUS "llama.cpp source: ${LLAMA_SOURCE_DIR}")
message(STATUS "llama.cpp build:  ${LLAMA_BUILD_DIR}")

execute_process(COMMAND git -C ${LLAMA_SOURCE_DIR} rev-parse HEAD
  OUTPUT_VARIABLE TANDEM_LLAMA_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT TANDEM_LLAMA_COMMIT AND EXISTS ${LLAMA_SOURCE_DIR}/.tandem-commit)
  # A source tree packed without .git (scripts/device-pack.sh) records its commit here.
  file(STRINGS ${LLAMA_SOURCE_DIR}/.tandem-commit TANDEM_LLAMA_COMMIT LIMIT_COUNT 1)
endif()
if(NOT TANDEM_LLAMA_COMMIT)
  set(TANDEM_LLAMA_COMMIT "unknown")
endif()
if(NOT TANDEM_LLAMA_COMMIT STREQUAL TANDEM_LLAMA_PINNED_COMMIT)
  message(WARNING "llama.cpp at ${LLAMA_SOURCE_DIR} is commit ${TANDEM_LLAMA_COMMIT}, not the pinned "
                  "${TANDEM_LLAMA_PINNED_COMMIT} (${TANDEM_LLAMA_TAG}); tandem is tested only against the pin.")
  set(TANDEM_LLAMA_TAG "unpinned")
endif()

set(_lib ${LLAMA_BUILD_DIR}/bin)
set(LLAMA_SERVER_EXE ${_lib}/llama-server)
set(LLAMA_RPC_SERVER_EXE ${_lib}/ggml-rpc-server)
set(LLAMA_BENCH_EXE ${_lib}/llama-bench)
set(_byproducts
  ${_lib}/libllama.so ${_lib}/libllama-common.so ${_lib}/libggml.so ${_lib}/libggml-base.so
  ${_lib}/libggml-rpc.so ${LLAMA_BUILD_DIR}/common/libllama-common-base.a
  ${LLAMA_SERVER_EXE} ${LLAMA_RPC_SERVER_EXE} ${LLAMA_BENCH_EXE})

# Runs on every build; an unchanged llama.cpp costs one no-op ninja call.
add_custom_target(llama_cpp ALL
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/build-llama.sh ${_build_args} > /dev/null
  BYPRODUCTS ${_byproducts}
  USES_TERMINAL
  COMMENT "llama.cpp (cached in ${LLAMA_BUILD_DIR})")

function(_tandem_import name location)
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION ${location})
  add_dependencies(${name} llama_cpp)
endfunction()

_tandem_import(llama::ggml_base ${_lib}/libggml-base.so)
_tandem_import(llama::ggml ${_lib}/libggml.so)
set_target_properties(llama::ggml PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES ${LLAMA_SOURCE_DIR}/ggml/include
  INTERFACE_LINK_LIBRARIES llama::ggml_base)
_tandem_import(llama::rpc ${_lib}/libggml-rpc.so)
set_target_properties(llama::rpc PROPERTIES INTERFACE_LINK_LIBRARIES llama::ggml)
_tandem_import(llama::llama ${_lib}/libllama.so)
set_target_properties(llama::llama PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES ${LLAMA_SOURCE_DIR}/include
  INTERFACE_LINK_LIBRARIES llama::ggml)

add_library(llama::common_base STATIC IMPORTED GLOBAL)
set_target_properties(llama::common_base PROPERTIES
  IMPORTED_LOCATION ${LLAMA_BUILD_DIR}/common/libllama-common-base.a)
add_dependencies(llama::common_base llama_cpp)
_tandem_import(llama::common ${_lib}/libllama-common.so)
# common's headers include llama.cpp's vendored nlohmann/json; they must come before Debian's.
set_target_properties(llama::common PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${LLAMA_SOURCE_DIR}/common;${LLAMA_SOURCE_DIR}/vendor"
  INTERFACE_LINK_LIBRARIES "llama::llama;llama::common_base"
  INTERFACE_COMPILE_DEFINITIONS LLAMA_SUBPROCESS)
