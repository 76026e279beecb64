/*
 * archive.c - what libfzclient answers without a daemon: the header of an
 * archive, and how large the archive of a job can be.  Both ask the engine
 * linked into the library, so they agree with what fzd writes and reads.
 */
#include <stdio.h>
#include <string.h>

#include "fz.h"
#include "internal.h"

int fz_client_archive_info(const void *arc, size_t arc_len, fz_client_archive *info) {
  if (!arc || !info)
    return FZ_EINVAL;
  fz_archive_info ai;
  int rc = fz_archive_inspect(arc, arc_len, &ai);
  if (rc < 0)
    return rc;
  memset(info, 0, sizeof *info);
  const char *name = fz_dtype_name(ai.dtype);
  snprintf(info->dtype, sizeof info->dtype, "%s", name ? name : "?");
  info->ndims = ai.ndims;
  for (unsigned i = 0; i < ai.ndims && i < FZ_CLIENT_MAX_DIMS; i++)
    info->shape[i] = ai.dims[i];
  info->raw_bytes = ai.raw_bytes;
  info->archive_bytes = ai.archive_bytes;
  info->chunks = ai.chunks;
  info->eb_abs = ai.eb_abs;
  snprintf(info->chain, sizeof info->chain, "%s", ai.chain);
  return 0;
}

int fz_client_compress_bound(const fz_job *job, uint64_t *bound, char *why, size_t why_len) {
  if (!job || !bound)
    return FZ_EINVAL;
  if (why && why_len)
    why[0] = '\0';
  fz_params p;
  fz_params_init(&p);
  int rc;
  if (!job->dtype || (rc = fz_dtype_parse(job->dtype, &p.dtype)) < 0) {
    if (why && why_len)
      snprintf(why, why_len, "unknown dtype '%s'", job->dtype ? job->dtype : "");
    return FZ_EDTYPE;
  }
  if (job->ndims < 1 || job->ndims > FZ_CLIENT_MAX_DIMS) {
    if (why && why_len)
      snprintf(why, why_len, "1 to %d dimensions, not %u", FZ_CLIENT_MAX_DIMS, job->ndims);
    return FZ_ESHAPE;
  }
  p.ndims = job->ndims;
  memcpy(p.dims, job->shape, sizeof(uint64_t) * job->ndims);
  p.pipeline = job->pipeline;
  p.eb = job->eb;
  fz_eb_mode m = FZ_EB_REL;
  if (job->mode && fz_eb_mode_parse(job->mode, &m) < 0) {
    if (why && why_len)
      snprintf(why, why_len, "unknown mode '%s' (abs, rel or pwrel)", job->mode);
    return FZ_EBOUND;
  }
  p.eb_mode = m;
  fz_plan *plan = NULL;
  rc = fz_plan_create(&p, &plan, why, why_len);
  if (rc < 0)
    return rc;
  *bound = fz_plan_compress_bound(plan);
  fz_plan_destroy(plan);
  return 0;
}
