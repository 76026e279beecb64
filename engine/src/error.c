/*
 * error.c - messages and names for the codes of fz_error.h, generated from the
 * one table so that a new code cannot be added without its text.
 */
#include "fz_error.h"

const char *fz_strerror(int err) {
  switch (err) {
#define FZ_ERR_MSG_(name, value, msg)                                         \
  case value:                                                                  \
    return msg;
    FZ_ERRNO_MAP(FZ_ERR_MSG_)
#undef FZ_ERR_MSG_
  default:
    return "unknown error";
  }
}

const char *fz_err_name(int err) {
  switch (err) {
#define FZ_ERR_NAME_(name, value, msg)                                        \
  case value:                                                                  \
    return #name;
    FZ_ERRNO_MAP(FZ_ERR_NAME_)
#undef FZ_ERR_NAME_
  default:
    return "UNKNOWN";
  }
}
