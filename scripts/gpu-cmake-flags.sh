# Sourced by scripts/gpu-validate.sh and scripts/gpu-mamba.sh: the CMake flags of a CUDA build
# on the GPU machine, in CFG. Where that machine lacks libdlpack-dev / libcmocka-dev, the
# headers and library copied into build/gpu-deps (git-ignored, carried with the call) are
# used instead; ninja when present. Extra flags: gpu_cmake_flags -DZGATE_BUILD_TOOLS=OFF ...
gpu_cmake_flags() {
  local deps=$PWD/build/gpu-deps
  CFG="-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DZGATE_CUDA=ON $*"
  [ -f /usr/include/dlpack/dlpack.h ] || CFG="$CFG -DDLPACK_INCLUDE_DIR=$deps/include"
  if [ ! -f /usr/include/cmocka.h ] && [ -f "$deps/include/cmocka.h" ]; then
    CFG="$CFG -DCMOCKA_INCLUDE_DIR=$deps/include -DCMOCKA_LIB=$deps/lib/libcmocka.so"
    export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  if command -v ninja >/dev/null; then CFG="$CFG -G Ninja"; fi
  # zgate._binding for the python3 that runs the tests (its file name carries that version)
  if command -v python3 >/dev/null; then CFG="$CFG -DZGATE_PYTHON=ON -DPython3_EXECUTABLE=$(command -v python3)"; fi
  export CFG
}
# After the build of $BUILD: the package as a wheel lays it out (python/zgate, its binding,
# libzgate, the JAX handlers where built, the case list) in $BUILD/pkg, put first on PYTHONPATH.
gpu_python_package() {
  rm -rf "$BUILD/pkg" && mkdir -p "$BUILD/pkg" && cp -r python/zgate "$BUILD/pkg/" &&
    cp -P "$BUILD"/src/libzgate.so* "$BUILD"/src/_binding*.so check/cases.def "$BUILD/pkg/zgate/" &&
    { [ ! -f "$BUILD/src/libzgate_jax.so" ] || cp "$BUILD/src/libzgate_jax.so" "$BUILD/pkg/zgate/"; } &&
    export PYTHONPATH=$PWD/$BUILD/pkg
}
