/* Ranks of an MPI program write their slabs of one chunked dataset
 * collectively, each chunk compressed by the fzd filter: by the fzd that
 * FZD_SOCKET names (the template unix:/run/fzd/gpu%l.sock picks the daemon
 * of the rank's GPU), or in process when none answers.  Every rank computes
 * STEPS time steps of its NY x NX part of a field; step s of rank r is
 * t[s, r*NY : (r+1)*NY, :], one chunk.  The file is then opened again and
 * each rank reads its part back (decoded in process) and compares it with
 * what it wrote.  Build with mpicc against a parallel HDF5 and the folder of
 * h5z_fzd.h; run with mpirun and HDF5_PLUGIN_PATH naming the folder of
 * libh5z_fzd.so. */
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "h5z_fzd.h"

enum { NY = 256, NX = 512, STEPS = 4 };
static const double EB = 1e-3; /* abs: one bound over the whole dataset */

static float value(int step, long y, long x) { /* the simulation's field */
  return (float)(10.0 * sin(0.021 * y + 0.13 * step) * cos(0.017 * x) + 0.002 * y);
}

/* A collective call that fails on one rank leaves the others waiting for
 * it inside HDF5 (parallel HDF5 1.10 cannot tell them), so a failure ends
 * the whole job: HDF5 has printed its error stack, with the filter's
 * message, above this line. */
static void fail(int rank, const char *what) {
  fprintf(stderr, "rank %d: %s failed; ending the job\n", rank, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *path = argc > 1 ? argv[1] : "parallel.h5";
  float *part = malloc(sizeof(float) * NY * NX), *back = malloc(sizeof(float) * NY * NX);
  if (!part || !back)
    MPI_Abort(MPI_COMM_WORLD, 1);

  /* Every rank opens the file and creates the dataset (collective calls). */
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  hsize_t dims[3] = {STEPS, (hsize_t)nranks * NY, NX}, chunk[3] = {1, NY, NX};
  hid_t space = H5Screate_simple(3, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, chunk);
  unsigned cd[H5Z_FZD_CD_USER_MIN] = {H5Z_FZD_BALANCED, H5Z_FZD_ABS};
  h5z_fzd_put_double(cd + H5Z_FZD_CD_EB, EB);
  /* Mandatory: a chunk the filter fails on fails the write. */
  H5Pset_filter(dcpl, H5Z_FILTER_FZD, H5Z_FLAG_MANDATORY, H5Z_FZD_CD_USER_MIN, cd);
  hid_t dset =
      file < 0 ? -1 : H5Dcreate2(file, "t", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dset < 0)
    fail(rank, "creating the dataset");

  /* Parallel HDF5 writes filtered chunks only collectively. */
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  hsize_t start[3] = {0, (hsize_t)rank * NY, 0}, count[3] = {1, NY, NX};
  hid_t mem = H5Screate_simple(3, count, NULL);
  for (int s = 0; s < STEPS; s++) {
    for (long y = 0; y < NY; y++)
      for (long x = 0; x < NX; x++)
        part[y * NX + x] = value(s, rank * NY + y, x);
    start[0] = (hsize_t)s;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    if (H5Dwrite(dset, H5T_NATIVE_FLOAT, mem, space, dxpl, part) < 0)
      fail(rank, "H5Dwrite");
  }
  H5Dclose(dset);
  if (H5Fclose(file) < 0)
    fail(rank, "H5Fclose");

  /* Read back: every chunk now goes through the filter's decoder. */
  file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  dset = file < 0 ? -1 : H5Dopen2(file, "t", H5P_DEFAULT);
  double worst = 0;
  int ok = dset >= 0;
  for (int s = 0; ok && s < STEPS; s++) {
    start[0] = (hsize_t)s;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    ok = H5Dread(dset, H5T_NATIVE_FLOAT, mem, space, dxpl, back) >= 0;
    for (long y = 0; ok && y < NY; y++)
      for (long x = 0; x < NX; x++) {
        double e = fabs((double)back[y * NX + x] - (double)value(s, rank * NY + y, x));
        worst = e > worst ? e : worst;
      }
  }
  if (!ok)
    fail(rank, "reading back");
  double worst_all = 0;
  MPI_Reduce(&worst, &worst_all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  hsize_t stored = H5Dget_storage_size(dset);
  if (rank == 0)
    printf("%d ranks wrote %d steps of %d x %d f32: %llu bytes stored for %llu, "
           "max error %.3g (bound %.3g)\n",
           nranks, STEPS, nranks * NY, NX, (unsigned long long)stored,
           (unsigned long long)(sizeof(float) * STEPS * nranks * NY * NX), worst_all, EB);
  H5Dclose(dset);
  H5Fclose(file);
  H5Sclose(mem);
  H5Sclose(space);
  H5Pclose(dxpl);
  H5Pclose(dcpl);
  H5Pclose(fapl);
  free(part);
  free(back);
  MPI_Finalize();
  return rank == 0 && worst_all > EB ? 1 : 0;
}
