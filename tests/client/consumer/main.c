/* A client of the installed libfzclient: prints the version, and with an
 * address argument pings that daemon. */
#include <fzclient.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (fz_client_version() != FZCLIENT_VERSION_HEX)
    return 1;
  printf("fzclient %s\n", fz_client_version_string());
  if (argc < 2)
    return 0;
  fz_client *c;
  char why[256];
  int rc = fz_client_connect(&c, argv[1], NULL, why, sizeof why);
  if (rc < 0) {
    fprintf(stderr, "%s: %s\n", fz_err_name(rc), why);
    return 2;
  }
  rc = fz_client_ping(c, NULL);
  fz_client_close(c);
  printf("ping: %s\n", rc == 0 ? "ok" : fz_strerror(rc));
  return rc == 0 ? 0 : 2;
}
