/*
 * frames.h - the "frames" method (frames.c): a batch of detector chunks
 * (HDF5 filter 32008, bitshuffle with LZ4 or zstd) decoded by the CPU
 * engine (fz_frames.h) into the pixels above a cut or into dense frames.
 * docs/protocol.md, "frames", is the contract.
 */
#ifndef FZD_FRAMES_H
#define FZD_FRAMES_H

#include "server.h"

/* Most chunks one request may carry. */
#define FZD_FRAMES_MAX 4096
/* Most "frames_setup" entries one connection may hold. */
#define FZD_FRAMES_SETUPS_MAX 8

struct fzd_frames_setups;

struct fzd_backend_state;

/* The loop thread's half: validates the params, copies the chunks and
 * queues the job (or replies with the error). */
void fzd_frames_method(fzd_server *srv, fzd_conn *c, const fzp_message *msg);
/* The worker's half: runs the whole batch; 0 or a negative code. */
int fzd_frames_job_run(fzd_job *job);
/* Packs the reply of a job that succeeded. */
void fzd_frames_reply(fzd_conn *c, const fzd_job *job);
/* "frames_setup": a mask and a matrix kept by the connection under an id
 * that later "frames" calls name. */
void fzd_frames_setup_method(fzd_server *srv, fzd_conn *c, const fzp_message *msg);
/* Frees a connection's entries and gives their memory back. */
void fzd_frames_setups_free(struct fzd_frames_setups *s);
/* Frees the request and results a job holds. */
void fzd_frames_free(struct fzd_frames_req *r);

#endif
