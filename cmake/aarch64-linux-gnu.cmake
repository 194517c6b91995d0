# Cross build for arm64 (aarch64) Linux on an x86 Debian/Ubuntu host, with the distribution's cross
# toolchain (g++-aarch64-linux-gnu) and arm64 multiarch -dev packages (dpkg --add-architecture
# arm64); scripts/install-cross.sh installs both. `make build-arm64` uses it for tandem, and
# scripts/build-llama.sh --toolchain for llama.cpp (its own cache key; CPU only, GGML_NATIVE off and
# GGML_CPU_ARM_ARCH set, see cmake/llama.cmake: TANDEM_ARM_ARCH).
#
# Built binaries run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR): GoogleTest's test
# discovery and `make test-arm64` (scripts/test-arm64.sh).

# build-llama.sh reads this line (the compilers' prefix) to put the cross compiler in its cache key.
set(TANDEM_CROSS_TRIPLE aarch64-linux-gnu)

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER ${TANDEM_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${TANDEM_CROSS_TRIPLE}-g++)
# Multiarch: arm64 libraries are in /usr/lib/aarch64-linux-gnu, headers in /usr/include (shared)
# and /usr/include/aarch64-linux-gnu; the cross compiler searches both by itself.
set(CMAKE_LIBRARY_ARCHITECTURE ${TANDEM_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH /usr/${TANDEM_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must see only the arm64 .pc files (and the architecture-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${TANDEM_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# qemu-user runs the arm64 binaries. -cpu max has every feature GB10's cores have (SVE2, i8mm,
# bf16, dotprod); SVE's vector length is set to GB10's 128 bits (qemu's default is 512), so ggml's
# SVE kernels take the path they take there. No -L /usr/aarch64-linux-gnu: with the cross
# toolchain's loader and libc, qemu 7.2 spins forever in the first pthread_create; the multiarch
# libc6:arm64 (/lib/ld-linux-aarch64.so.1, pulled in by the -dev packages) works.
set(CMAKE_CROSSCOMPILING_EMULATOR
    qemu-aarch64;-cpu;max,sve-default-vector-length=16)
