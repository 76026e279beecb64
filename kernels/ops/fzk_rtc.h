/*
 * fzk_rtc.h - what NVRTC compiles before every generated kernel (jit.c
 * passes it with --pre-include): the few fixed-width integer types the
 * device-op headers use.  NVRTC has no C library; every header those
 * kernels include leaves out its libc includes and its host prototypes
 * under __CUDACC_RTC__, so this is all they need besides the built-ins.
 */
#ifndef FZK_RTC_H
#define FZK_RTC_H

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long uintptr_t;
#define UINT32_MAX 0xffffffffu
#define UINT64_MAX 0xffffffffffffffffull
#define UINT64_C(v) v##ull
#ifndef NULL
#define NULL 0
#endif

/* fz.h's PWREL mode, which chain32_ops.cuh compares with (fz.h, a host
 * header, is not NVRTC's); fzk.h's FZK_EB_PWREL is the same number. */
#define FZ_EB_PWREL 2

#endif
