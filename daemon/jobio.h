/*
 * jobio.h - a job's host input and output (jobio.c), shared by the CPU
 * backend (cpu.c) and the GPU backend (gpu.c).  Offsets are relative to
 * the job's in_offset / out_offset; every call that fails leaves its reason
 * in job->why.
 */
#ifndef FZD_JOBIO_H
#define FZD_JOBIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* Whether the input is in memory (inline, or a mapped memfd): then it is
 * read in place, else with pread from in_fd. */
bool fzd_job_input_in_memory(const fzd_job *job);
/* Points *at to len bytes at off of the input: in place when it is in
 * memory, else read into buf (which holds len bytes). */
int fzd_job_input_at(fzd_job *job, uint64_t off, size_t len, void *buf, const void **at);
/* The whole input in memory (read into job->in_data when it is not). */
int fzd_job_read_input(fzd_job *job, const void **in);
/* Copies the whole input into dst, which holds in_len bytes. */
int fzd_job_read_into(fzd_job *job, void *dst);

/* FZ_ENOSPC, with the size needed, when a result of len bytes does not fit
 * where out_fd may take it (out_length, a fixed-size memfd). */
int fzd_job_check_room(fzd_job *job, uint64_t len);
/* The bytes the output may take from out_offset: out_length when the
 * client gave one, and no more than a fixed-size memfd holds past
 * out_offset; UINT64_MAX without a limit. */
uint64_t fzd_job_out_room(fzd_job *job);
/* Writes len bytes at off of the output descriptor. */
int fzd_job_pwrite(fzd_job *job, uint64_t off, const void *data, size_t len);
/* Cuts a file output after len bytes of result (not a fixed-size memfd). */
int fzd_job_truncate(fzd_job *job, uint64_t len);
/* Delivers len bytes of result, taking data (malloc'd): kept for the inline
 * reply, or written to out_fd. */
int fzd_job_deliver(fzd_job *job, void *data, size_t len);
/* The same for data the caller keeps: copied for the inline reply. */
int fzd_job_deliver_copy(fzd_job *job, const void *data, size_t len);

#endif
