/* Writes a 2-D float dataset compressed by fzd (REL bound 1e-3), closes the
 * file, opens it again and reads the dataset back (so that every chunk is
 * decoded by the filter, not taken from HDF5's chunk cache), and prints the
 * largest error.  Build with HDF5's flags and the folder of h5z_fzd.h; run
 * with HDF5_PLUGIN_PATH naming the folder of libh5z_fzd.so. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "h5z_fzd.h"

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "example.h5";
  enum { NY = 500, NX = 300 };
  const double eb = 1e-3;
  float *x = malloc(sizeof(float) * NY * NX), *y = malloc(sizeof(float) * NY * NX);
  if (!x || !y)
    return 1;
  for (int i = 0; i < NY; i++)
    for (int j = 0; j < NX; j++)
      x[i * NX + j] = (float)(sin(i * 0.02) * cos(j * 0.03) * 50.0);

  /* pipeline, mode, bound (two words): 7 values would add a fill value. */
  unsigned cd[H5Z_FZD_CD_USER_MIN] = {H5Z_FZD_BALANCED, H5Z_FZD_REL};
  h5z_fzd_put_double(cd + H5Z_FZD_CD_EB, eb);
  hsize_t dims[2] = {NY, NX}, chunk[2] = {128, 128}; /* edge chunks are partial */
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t space = H5Screate_simple(2, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  /* Mandatory: a chunk the filter fails on fails the write. */
  H5Pset_filter(dcpl, H5Z_FILTER_FZD, H5Z_FLAG_MANDATORY, H5Z_FZD_CD_USER_MIN, cd);
  hid_t dset = H5Dcreate2(file, "x", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dset < 0 || H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0)
    return 1;
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);

  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  dset = file < 0 ? -1 : H5Dopen2(file, "x", H5P_DEFAULT);
  if (dset < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) < 0)
    return 1;
  hsize_t stored = H5Dget_storage_size(dset);
  H5Dclose(dset);
  H5Fclose(file);

  /* REL is relative to each chunk's range; the whole array's range is at
   * least as large, so this check is looser than the one the filter keeps. */
  float lo = x[0], hi = x[0];
  double worst = 0;
  for (int k = 0; k < NY * NX; k++) {
    lo = x[k] < lo ? x[k] : lo;
    hi = x[k] > hi ? x[k] : hi;
    double e = fabs((double)x[k] - (double)y[k]);
    worst = e > worst ? e : worst;
  }
  printf("%zu bytes stored for %zu, max error %.3g (bound %.3g)\n", (size_t)stored,
         sizeof(float) * NY * NX, worst, eb * (hi - lo));
  free(x);
  free(y);
  return worst <= eb * (hi - lo) && stored < sizeof(float) * NY * NX ? 0 : 1;
}
