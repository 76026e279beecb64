/*
 * gpu_main.c - the main of every GPU suite: exits 77 (skipped) when no GPU
 * can be used, otherwise runs the Criterion tests, with the ratio preset's
 * encoder kernels on (FZ_GPU_RATIO_ENCODER=kernels, for the suites and the
 * daemons they start, unless the caller set it), so that the suites keep
 * requiring the kernels' archives to be the CPU engine's.
 *
 * The probe runs in a child process: a process that initialised CUDA must
 * not fork, and Criterion forks a worker for each test.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int have_gpu(void) {
  pid_t pid = fork();
  if (pid < 0)
    return 0;
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid)
    return 0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
  if (!have_gpu()) {
    fprintf(stderr, "no usable CUDA device: skipping\n");
    return 77;
  }
  setenv("FZ_GPU_RATIO_ENCODER", "kernels", 0);
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true))
    result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  return result;
}
