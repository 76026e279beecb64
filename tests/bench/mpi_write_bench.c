/*
 * mpi_write_bench.c - one collective parallel HDF5 write of a real field,
 * compressed by the fzd filter or not, timed (tests/bench/mpi_write_bench.py
 * drives it; not run by ctest).
 *
 * usage: mpirun -np N fz_mpi_write_bench FILE FIELD.f32 ROWS COLS TILES MODE [EB]
 *
 * Every rank writes its slab of one 2-D f32 dataset: the field (ROWS x COLS,
 * raw little-endian) repeated TILES times down the rows, each rank starting
 * at another row so that no two ranks write the same bytes.  Chunks are
 * whole rows of one rank's slab (about 4 MiB), so each chunk is compressed
 * by the rank that writes it.  MODE is "raw" (no filter: the uncompressed
 * write) or "fzd" (the balanced preset, REL bound EB, default 1e-3; the
 * daemon or the embedded engine as FZD_HDF5_DAEMON and FZD_SOCKET say).
 *
 * The time runs from a barrier before H5Fcreate to a barrier after
 * H5Fclose, so it holds creating the file and the dataset, compressing,
 * writing and closing; then rank 0 fsyncs the file and a second time
 * includes that.  Rank 0 prints one line of key=value pairs.
 */
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5z_fzd.h"

#define CHUNK_BYTES (4u << 20)

static int rank;

static void fail(const char *what) {
  fprintf(stderr, "rank %d: %s failed; ending the job\n", rank, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc < 7 || argc > 8) {
    if (rank == 0)
      fprintf(stderr, "usage: fz_mpi_write_bench FILE FIELD.f32 ROWS COLS TILES raw|fzd [EB]\n");
    MPI_Finalize();
    return 2;
  }
  const char *path = argv[1], *field = argv[2], *mode = argv[6];
  long rows = atol(argv[3]), cols = atol(argv[4]), tiles = atol(argv[5]);
  double eb = argc > 7 ? atof(argv[7]) : 1e-3;
  int compress = strcmp(mode, "fzd") == 0;
  if (rows < 1 || cols < 1 || tiles < 1 || (!compress && strcmp(mode, "raw") != 0)) {
    if (rank == 0)
      fprintf(stderr, "fz_mpi_write_bench: bad arguments\n");
    MPI_Finalize();
    return 2;
  }

  /* Chunks of whole rows, about CHUNK_BYTES each, and a slab of whole
   * chunks (TILES times the field's rows, rounded down), so that no chunk
   * straddles two ranks' slabs. */
  hsize_t chunk_rows = CHUNK_BYTES / ((size_t)cols * sizeof(float));
  chunk_rows = chunk_rows < 1 ? 1 : chunk_rows;
  long slab_rows = rows * tiles / (long)chunk_rows * (long)chunk_rows;
  if (slab_rows < 1)
    slab_rows = (long)(chunk_rows = (hsize_t)(rows * tiles));

  /* The field, then this rank's slab: its rows over and over, from another
   * row for each rank. */
  size_t n = (size_t)rows * cols;
  float *src = malloc(n * sizeof(float));
  FILE *f = fopen(field, "rb");
  if (!src || !f || fread(src, sizeof(float), n, f) != n)
    fail("reading the field");
  fclose(f);
  float *slab = malloc((size_t)slab_rows * cols * sizeof(float));
  if (!slab)
    fail("allocating the slab");
  for (long r = 0; r < slab_rows; r++)
    memcpy(slab + (size_t)r * cols, src + (size_t)((r + 97L * rank) % rows) * cols,
           cols * sizeof(float));
  free(src);

  hsize_t dims[2] = {(hsize_t)nranks * slab_rows, cols}, chunk[2] = {chunk_rows, cols};
  hsize_t start[2] = {(hsize_t)rank * slab_rows, 0}, count[2] = {slab_rows, cols};

  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (file < 0)
    fail("H5Fcreate");
  hid_t space = H5Screate_simple(2, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  if (compress) {
    unsigned cd[H5Z_FZD_CD_USER_MIN] = {H5Z_FZD_BALANCED, H5Z_FZD_REL};
    h5z_fzd_put_double(cd + H5Z_FZD_CD_EB, eb);
    H5Pset_filter(dcpl, H5Z_FILTER_FZD, H5Z_FLAG_MANDATORY, H5Z_FZD_CD_USER_MIN, cd);
  }
  hid_t dset = H5Dcreate2(file, "x", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dset < 0)
    fail("H5Dcreate2");
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  hid_t mem = H5Screate_simple(2, count, NULL);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
  if (H5Dwrite(dset, H5T_NATIVE_FLOAT, mem, space, dxpl, slab) < 0)
    fail("H5Dwrite");
  /* The chunks' bytes alone: the data over the pipeline's ratio. */
  unsigned long long chunk_bytes = (unsigned long long)H5Dget_storage_size(dset);
  if (H5Dclose(dset) < 0 || H5Fclose(file) < 0)
    fail("closing the file");
  MPI_Barrier(MPI_COMM_WORLD);
  double t1 = MPI_Wtime(), t2 = t1;
  long long file_bytes = 0;
  if (rank == 0) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fsync(fd) != 0 || fstat(fd, &st) != 0)
      fail("fsync of the file");
    close(fd);
    t2 = MPI_Wtime();
    file_bytes = (long long)st.st_size;
    printf("mode=%s ranks=%d raw_bytes=%llu chunk_bytes=%llu file_bytes=%lld chunk_rows=%llu "
           "write_s=%.6f fsync_s=%.6f\n",
           mode, nranks, (unsigned long long)(sizeof(float) * dims[0] * dims[1]), chunk_bytes,
           file_bytes, (unsigned long long)chunk_rows, t1 - t0, t2 - t0);
  }
  H5Sclose(mem);
  H5Sclose(space);
  H5Pclose(dxpl);
  H5Pclose(dcpl);
  H5Pclose(fapl);
  free(slab);
  MPI_Finalize();
  return 0;
}
