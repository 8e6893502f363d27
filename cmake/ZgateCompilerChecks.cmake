# Project-wide compiler settings: warnings, no fast-math, optional sanitizers, CUDA detection.
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  add_compile_options(-Wall -Wextra -fno-fast-math -fno-finite-math-only)
endif()

if(ZGATE_SANITIZE)
  add_compile_options(-fsanitize=${ZGATE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${ZGATE_SANITIZE})
endif()

set(ZGATE_HAVE_CUDA OFF)
if(ZGATE_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)   # sets CMAKE_CUDA_COMPILER where nvcc works
endif()
if((ZGATE_CUDA STREQUAL "AUTO" AND CMAKE_CUDA_COMPILER) OR (ZGATE_CUDA AND NOT ZGATE_CUDA STREQUAL "AUTO"))
  set(ZGATE_HAVE_CUDA ON)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
