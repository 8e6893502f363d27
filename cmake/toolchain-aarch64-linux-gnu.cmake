# Cross-compiling zgate for aarch64 Linux with Debian's cross toolchain, and running what it
# builds (ctest, try_run) under qemu-user. Used by scripts/test.d/50-aarch64.sh:
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
# Needs (Debian): gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user, and for the tests
# the multiarch package libcmocka-dev:arm64 (after `dpkg --add-architecture arm64`).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ZGATE_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${ZGATE_CROSS_TRIPLE}-gcc)
# The ARMv8.0-A baseline, stated so that nothing newer (FP16 arithmetic, BF16, SVE) can slip
# into the NEON path: it must run on every aarch64 CPU, Kunpeng 920 (ARMv8.2) included.
set(CMAKE_C_FLAGS_INIT "-march=armv8-a")

# Target libraries live in two places: the cross libc in /usr/aarch64-linux-gnu, and Debian
# multiarch arm64 packages (libcmocka) in /usr/lib/aarch64-linux-gnu. Architecture-independent
# headers (dlpack, cmocka) are in /usr/include. Search both roots for libraries, headers and
# package configs, but take programs (python, qemu) from the build machine.
set(CMAKE_LIBRARY_ARCHITECTURE ${ZGATE_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH /usr/${ZGATE_CROSS_TRIPLE} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest runs every test executable through this (add_test with a target as COMMAND).
# -L: the dynamic loader of the cross toolchain. -E LD_LIBRARY_PATH: its libc too. Without
# it the loader finds the host's /etc/ld.so.cache, which lists the multiarch libc6:arm64
# (pulled in by libcmocka0:arm64, a slightly different build): the cross loader with that
# libc hangs in the first pthread_create (seen with OpenMP). Libraries not in the cross
# prefix (libcmocka) still come from /usr/lib/aarch64-linux-gnu through the cache.
find_program(ZGATE_QEMU_AARCH64 qemu-aarch64)
if(ZGATE_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${ZGATE_QEMU_AARCH64} -L /usr/${ZGATE_CROSS_TRIPLE}
      -E LD_LIBRARY_PATH=/usr/${ZGATE_CROSS_TRIPLE}/lib)
endif()
