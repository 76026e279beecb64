/* devitocomp_example.c - ten snapshots of a padded 3-D float32 field through
 * libdevitocomp.so, as DevitoPRO drives a provider: one plan, payloads and
 * sidecars kept per snapshot, then every snapshot decompressed and checked
 * against the relative error.  Uses fzd at $FZD_SOCKET when it answers, the
 * embedded engine otherwise.  Build: cc example.c -I$DEVITOCOMP_ROOT/include
 * -L$DEVITOCOMP_ROOT/lib -ldevitocomp -lm -Wl,-rpath,$DEVITOCOMP_ROOT/lib */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "devitocomp.h"

#define NZ 32
#define NY 48
#define NX 40
#define HALO 4
#define STEPS 10

int main(void) {
  /* The padded allocation; the snapshot is its interior. */
  const int64_t py = NY + 2 * HALO, px = NX + 2 * HALO;
  float *u = calloc((size_t)(NZ + 2 * HALO) * py * px, sizeof(float));
  float *interior = u + (HALO * py + HALO) * px + HALO;
  devitocomp_tensor_t t = {DEVITOCOMP_FLOAT32, 3, {NZ, NY, NX}, {py * px, px, 1}};
  devitocomp_execution_t host = {DEVITOCOMP_EXECUTION_HOST, 0, NULL};
  devitocomp_plan_t *plan;
  const double error = 0.01; /* DevitoComp(error=0.01) */
  if (devitocomp_abi_version() != DEVITOCOMP_ABI_VERSION ||
      devitocomp_plan_create(&t, &host, "0.01", &plan) != DEVITOCOMP_SUCCESS) {
    fprintf(stderr, "plan: %s\n", devitocomp_last_error());
    return 1;
  }
  devitocomp_limits_t lim;
  devitocomp_plan_limits(plan, &lim);
  /* aligned_alloc takes whole multiples of the alignment. */
  size_t cap = (lim.max_compressed_bytes + lim.payload_alignment - 1) & ~(lim.payload_alignment - 1);
  size_t sc = (lim.sidecar_bytes + lim.sidecar_alignment - 1) & ~(lim.sidecar_alignment - 1);
  void *payload[STEPS], *sidecar[STEPS];
  size_t bytes[STEPS], total = 0;
  for (int s = 0; s < STEPS; s++) {
    for (int z = 0; z < NZ; z++)
      for (int y = 0; y < NY; y++)
        for (int x = 0; x < NX; x++)
          interior[(z * py + y) * px + x] = (float)(sin(0.1 * x + 0.2 * s) * cos(0.07 * y) + 0.01 * z);
    payload[s] = aligned_alloc(lim.payload_alignment, cap);
    sidecar[s] = aligned_alloc(lim.sidecar_alignment, sc);
    if (devitocomp_compress(plan, &host, interior, payload[s], cap,
                            &bytes[s], sidecar[s]) != DEVITOCOMP_SUCCESS) {
      fprintf(stderr, "compress: %s\n", devitocomp_last_error());
      return 1;
    }
    total += bytes[s];
  }
  int bad = 0;
  for (int s = 0; s < STEPS; s++) {
    if (devitocomp_decompress(plan, &host, payload[s], bytes[s], sidecar[s], interior) !=
        DEVITOCOMP_SUCCESS) {
      fprintf(stderr, "decompress: %s\n", devitocomp_last_error());
      return 1;
    }
    for (int z = 0; z < NZ; z++)
      for (int y = 0; y < NY; y++)
        for (int x = 0; x < NX; x++) {
          double v = (float)(sin(0.1 * x + 0.2 * s) * cos(0.07 * y) + 0.01 * z);
          bad += fabs(interior[(z * py + y) * px + x] - v) > error * fabs(v);
        }
    free(payload[s]);
    free(sidecar[s]);
  }
  printf("%s: %d snapshots, %zu bytes -> %zu, %d values off the bound\n",
         devitocomp_provider_name(), STEPS, (size_t)STEPS * NZ * NY * NX * 4, total, bad);
  devitocomp_plan_destroy(plan);
  free(u);
  return bad != 0;
}
