// cxx_header.cpp - fzclient.h used from C++: the header must compile as C++
// (extern "C", no C-only constructs) and its symbols must link unmangled.
#include "fzclient.h"

#include <cstdio>

int main() {
  fz_job job;
  fz_job_init(&job);
  fz_client_opts opts;
  fz_client_opts_init(&opts);
  fz_client *c = nullptr;
  char why[128];
  int rc = fz_client_connect(&c, "unix:/nonexistent/fzd.sock", &opts, why, sizeof why);
  if (rc != FZ_ECONNREFUSED || c != nullptr || job.in_fd != -1) {
    std::fprintf(stderr, "unexpected: %s (%s)\n", fz_strerror(rc), why);
    return 1;
  }
  if (fz_client_version() != FZCLIENT_VERSION_HEX)
    return 1;
  std::printf("fzclient %s from C++: ok\n", fz_client_version_string());
  return 0;
}
