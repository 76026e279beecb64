/*
 * device_none.c - the device calls of a libfzclient built without the CUDA
 * headers (cuda.h), which device.c takes the driver API's types from.  The
 * API stays the same, so programs link either build; here every device job
 * is refused with FZ_ENOGPU saying why, and nothing is ever exported, so
 * there is nothing to release.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

int fzc_device_init(fz_client *c) {
  c->dev = NULL;
  return 0;
}

void fzc_device_free(fz_client *c) { (void)c; }

int fzc_device_buffers(fz_client *c, const void *in, size_t in_len, fzc_dev_buffer *din,
                       const void *out, size_t out_len, fzc_dev_buffer *dout) {
  (void)in, (void)in_len, (void)din, (void)out, (void)out_len, (void)dout;
  return fzc_fail(c, FZ_ENOGPU,
                  "this libfzclient was built without the CUDA headers (cuda.h): device "
                  "buffers need a build with them");
}

static int refuse(fz_client *c, fz_result *res) {
  int rc = fzc_fail(c, FZ_ENOGPU,
                    "this libfzclient was built without the CUDA headers (cuda.h), so it "
                    "cannot load libcuda.so.1: device buffers need a build with them");
  if (res) {
    memset(res, 0, sizeof *res);
    res->status = rc;
    snprintf(res->message, sizeof res->message, "%s", c->errmsg);
  }
  return rc;
}

int fz_client_compress_device(fz_client *c, const fz_job *job, const void *d_in,
                              size_t in_len, void *d_out, size_t out_cap, void *stream,
                              fz_result *res) {
  (void)job, (void)d_in, (void)in_len, (void)d_out, (void)out_cap, (void)stream;
  if (!c || !res)
    return FZ_EINVAL;
  return refuse(c, res);
}

int fz_client_decompress_device(fz_client *c, const void *d_arc, size_t arc_len,
                                void *d_out, size_t out_cap, void *stream,
                                fz_result *res) {
  (void)d_arc, (void)arc_len, (void)d_out, (void)out_cap, (void)stream;
  if (!c || !res)
    return FZ_EINVAL;
  return refuse(c, res);
}

int fz_client_submit_device(fz_client *c, fz_op op, const fz_job *job, const void *d_in,
                            size_t in_len, void *d_out, size_t out_cap, void *stream,
                            fz_done_cb cb, void *user, uint64_t *id) {
  (void)op, (void)job, (void)d_in, (void)in_len, (void)d_out, (void)out_cap, (void)stream;
  (void)cb, (void)user, (void)id;
  if (!c)
    return FZ_EINVAL;
  return refuse(c, NULL);
}

int fz_client_release_device(fz_client *c, const void *d_ptr) {
  (void)d_ptr;
  return c ? 0 : FZ_EINVAL;
}
