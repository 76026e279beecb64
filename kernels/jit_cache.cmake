# libfzjitcache: the JIT module cache (kernels/jit/jit_cache.c) and its
# SHA-256.  Plain C with no CUDA, so it is built, and its tests run, in every
# preset, the CPU-only ones included; the top level includes this file
# whether or not it found nvcc, and libfzkernels links the library.
add_library(fzjitcache STATIC
  ${CMAKE_CURRENT_LIST_DIR}/jit/jit_cache.c
  ${CMAKE_CURRENT_LIST_DIR}/jit/sha256.c)
target_include_directories(fzjitcache
  PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_LIST_DIR}/jit>)
target_link_libraries(fzjitcache PUBLIC fzengine Threads::Threads)
# SHA-256 runs over every image loaded or stored; GCC unrolls its rounds at -O3.
target_compile_options(fzjitcache PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O3>)
