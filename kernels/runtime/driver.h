/*
 * driver.h - the CUDA driver API, reached through the runtime.
 *
 * The library never links libcuda: a program that did could not start at
 * all on a machine without a driver.  Driver entry points are found at run
 * time (cudaGetDriverEntryPointByVersion), and the few calls the backend
 * makes through them are wrapped here.
 */
#ifndef FZK_DRIVER_H
#define FZK_DRIVER_H

#include "fz_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The driver API's entry point `name` (CUDA 12 ABI), found through the
 * runtime; NULL, and *missing set to name if it was NULL, when the driver
 * has none. */
void *fzk_driver_entry(const char *name, const char **missing);

/* Launches a kernel loaded through the driver (a CUfunction) with grid x
 * block threads and smem bytes of dynamic shared memory on stream s, and
 * returns the outcome in the runtime's numbers (0, or a cudaError_t as an
 * int), as the launchers of the built-in kernels do. */
int fzk_driver_launch(void *fn, unsigned grid, unsigned block, unsigned smem, fz_gpu_stream s,
                      void **args);

#ifdef __cplusplus
}
#endif
#endif
