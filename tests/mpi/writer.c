/*
 * writer.c - the MPI program of the tests in this folder (tests/mpi).
 *
 * Every rank writes its slab of each time step of one chunked dataset,
 * collectively, through the fzd HDF5 filter: "t" (the balanced preset, an
 * absolute bound, the filter mandatory) and beside it "ref", the same
 * values unfiltered, so that a reader with no daemon and no MPI can check
 * every value of "t" against its bound without computing the field again.
 *
 * usage: writer FILE STEPS [GATE]
 *
 * With GATE, all ranks stop after the first step until the file GATE.go
 * exists, and rank 0 creates GATE.ready when they got there: a test kills
 * a daemon at that point, so that the death falls between two collective
 * writes of one open file, after every rank has used its daemon, and not
 * before or after the program's whole write by chance.
 *
 * A write that fails on one rank ends the job with MPI_Abort: the other
 * ranks are inside HDF5's collective write, waiting for that rank, and
 * nothing else would let them out.
 */
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5z_fzd.h"

enum { NY = 128, NX = 256 }; /* one rank's slab of a step: one chunk */
#define EB 1e-3

static int rank;

/* step < 0: before the first step. */
static void fail(const char *what, int step) {
  char at[32] = "";
  if (step >= 0)
    snprintf(at, sizeof at, "step %d: ", step);
  fprintf(stderr, "rank %d: %s%s failed (HDF5's error stack above); ending the job\n", rank, at,
          what);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* A smooth field with a slow trend per step, as a simulation writes. */
static void fill(float *part, int step) {
  for (long y = 0; y < NY; y++) {
    long gy = (long)rank * NY + y;
    for (long x = 0; x < NX; x++)
      part[y * NX + x] =
          (float)(25.0 * sin(0.013 * gy + 0.2 * step) * cos(0.021 * x) + 0.01 * step * gy);
  }
}

static void wait_at_gate(const char *gate) {
  char path[4096];
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    snprintf(path, sizeof path, "%s.ready", gate);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f) != 0) {
      perror(path);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    snprintf(path, sizeof path, "%s.go", gate);
    while (access(path, F_OK) != 0)
      usleep(10000);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc < 3 || argc > 4 || atoi(argv[2]) < 1) {
    if (rank == 0)
      fprintf(stderr, "usage: writer FILE STEPS [GATE]\n");
    MPI_Finalize();
    return 2;
  }
  const char *path = argv[1], *gate = argc > 3 ? argv[3] : NULL;
  int steps = atoi(argv[2]);
  float *part = malloc(sizeof(float) * NY * NX);
  if (!part)
    MPI_Abort(MPI_COMM_WORLD, 1);

  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (file < 0)
    fail("H5Fcreate", -1);
  hsize_t dims[3] = {(hsize_t)steps, (hsize_t)nranks * NY, NX}, chunk[3] = {1, NY, NX};
  hid_t space = H5Screate_simple(3, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, chunk);
  unsigned cd[H5Z_FZD_CD_USER_MIN] = {H5Z_FZD_BALANCED, H5Z_FZD_ABS};
  h5z_fzd_put_double(cd + H5Z_FZD_CD_EB, EB);
  H5Pset_filter(dcpl, H5Z_FILTER_FZD, H5Z_FLAG_MANDATORY, H5Z_FZD_CD_USER_MIN, cd);
  hid_t t = H5Dcreate2(file, "t", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (t < 0)
    fail("H5Dcreate2 of t", -1);
  hid_t ref = H5Dcreate2(file, "ref", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (ref < 0)
    fail("H5Dcreate2 of ref", -1);
  /* The bound, for the reader. */
  double eb = EB;
  hid_t scalar = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(t, "eb", H5T_IEEE_F64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0 || H5Awrite(attr, H5T_NATIVE_DOUBLE, &eb) < 0)
    fail("writing the attribute eb", -1);
  H5Aclose(attr);
  H5Sclose(scalar);

  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  hsize_t start[3] = {0, (hsize_t)rank * NY, 0}, count[3] = {1, NY, NX};
  hid_t mem = H5Screate_simple(3, count, NULL);
  for (int s = 0; s < steps; s++) {
    if (s == 1 && gate)
      wait_at_gate(gate);
    fill(part, s);
    start[0] = (hsize_t)s;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    if (H5Dwrite(t, H5T_NATIVE_FLOAT, mem, space, dxpl, part) < 0)
      fail("H5Dwrite of t", s);
    if (H5Dwrite(ref, H5T_NATIVE_FLOAT, mem, space, dxpl, part) < 0)
      fail("H5Dwrite of ref", s);
  }
  if (H5Dclose(t) < 0 || H5Dclose(ref) < 0 || H5Fclose(file) < 0)
    fail("closing the file", steps);
  if (rank == 0)
    printf("writer: %d ranks wrote %d steps of %d x %d f32\n", nranks, steps, nranks * NY, NX);
  H5Sclose(mem);
  H5Sclose(space);
  H5Pclose(dxpl);
  H5Pclose(dcpl);
  H5Pclose(fapl);
  free(part);
  MPI_Finalize();
  return 0;
}
