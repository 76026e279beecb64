/*
 * cpu.h - the CPU backend of the worker pool (cpu.c).
 */
#ifndef FZD_CPU_H
#define FZD_CPU_H

#include <stdint.h>

#include "backend.h"
#include "budget.h"

/* Fills be with the CPU backend: plan_cache_entries plans shared by the
 * workers (plus one slot per worker) holding at most plan_cache_bytes
 * together (0: no byte bound), and the running jobs' buffers reserved from
 * mem (memory_limit), which must outlive the backend. */
int fzd_cpu_backend(unsigned plan_cache_entries, uint64_t plan_cache_bytes,
                    fzd_budget *mem, fzd_backend_ops *be);

#endif
