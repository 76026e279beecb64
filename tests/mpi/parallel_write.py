# Ranks of an MPI job write their slabs of one dataset collectively, each
# chunk compressed by the fzd filter (through the daemon FZD_SOCKET names,
# or in process), then read their slabs back and check the bound.  Run as
# mpirun -np 4 python3 parallel_write.py; Debian's h5py uses its MPI build
# under mpirun.
import sys

import fzd.h5
import h5py
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, nranks = comm.Get_rank(), comm.Get_size()
path = sys.argv[1] if len(sys.argv) > 1 else "parallel_py.h5"
ny, nx, eb = 256, 512, 1e-3
y = np.arange(rank * ny, (rank + 1) * ny)[:, None]
part = (10 * np.sin(0.021 * y) * np.cos(0.017 * np.arange(nx)) + 0.002 * y).astype("f4")
mine = slice(rank * ny, (rank + 1) * ny)

with h5py.File(path, "w", driver="mpio", comm=comm) as f:
    # Every rank creates the dataset (a collective call), one chunk per rank.
    t = f.create_dataset("t", (nranks * ny, nx), "f4", chunks=(ny, nx),
                         **fzd.h5.filter(pipeline="balanced", eb=eb, mode="abs"))
    with t.collective:  # parallel HDF5 writes filtered chunks only collectively
        t[mine] = part
with h5py.File(path, "r", driver="mpio", comm=comm) as f:
    back = f["t"][mine]
    stored = f["t"].id.get_storage_size()

err = comm.allreduce(float(np.abs(back.astype("f8") - part.astype("f8")).max()), op=MPI.MAX)
if rank == 0:
    print("%d ranks: %d bytes stored for %d, max error %.3g" % (nranks, stored,
                                                              nranks * part.nbytes, err))
assert err <= eb and stored < nranks * part.nbytes
