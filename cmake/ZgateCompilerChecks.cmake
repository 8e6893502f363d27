# Project-wide compiler settings: warnings, no fast-math, optional sanitizers, CUDA detection.
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  add_compile_options(-Wall -Wextra -fno-fast-math -fno-finite-math-only)
endif()

if(ZGATE_SANITIZE)
  add_compile_options(-fsanitize=${ZGATE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${ZGATE_SANITIZE})
endif()

set(ZGATE_WITH_CUDA OFF)
if(ZGATE_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)   # sets CMAKE_CUDA_COMPILER where nvcc works
endif()
if((ZGATE_CUDA STREQUAL "AUTO" AND CMAKE_CUDA_COMPILER) OR (ZGATE_CUDA AND NOT ZGATE_CUDA STREQUAL "AUTO"))
  set(ZGATE_WITH_CUDA ON)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
# One CUDA runtime per process, linked one way by the library, the tool, the tests and the
# examples. Shared by default: a process that uses CUDA already (PyTorch loads
# libcudart.so.<major>) shares it with zgate. ZGATE_CUDART=STATIC puts a private copy into
# libzgate.so; a program that calls the runtime itself then links libzgate.a beside one
# (ZGATE_CUDA_PROGRAM_LIB).
set(ZGATE_CUDART SHARED CACHE STRING "CUDA runtime linkage: SHARED or STATIC")
set_property(CACHE ZGATE_CUDART PROPERTY STRINGS SHARED STATIC)
if(ZGATE_CUDART STREQUAL "STATIC")
  set(ZGATE_CUDA_PROGRAM_LIB zgate_static)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  set(ZGATE_CUDART_TARGET CUDA::cudart_static)
  set(ZGATE_CUDART_FILE "${CUDA_cudart_static_LIBRARY}")
  set(ZGATE_CUDART_PC "-lcudart_static -ldl -lrt")
else()
  set(ZGATE_CUDA_PROGRAM_LIB zgate)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  set(ZGATE_CUDART_TARGET CUDA::cudart)
  set(ZGATE_CUDART_FILE "${CUDA_cudart_LIBRARY}")
  set(ZGATE_CUDART_PC "-lcudart")
endif()
