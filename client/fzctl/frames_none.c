/*
 * frames_none.c - `fzctl frames` in a build that found no HDF5 library
 * (Debian: libhdf5-dev): the command is listed and says why it cannot run.
 */
#include "fzctl.h"

int ctl_cmd_frames(const ctl_global *g, int argc, char **argv) {
  (void)g, (void)argc, (void)argv;
  ctl_err("this fzctl was built without HDF5 (Debian: libhdf5-dev), so 'frames' cannot read "
          "HDF5 files; build it again where HDF5's development files are installed");
  return CTL_USAGE;
}
