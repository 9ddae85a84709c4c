/* Every cudaMalloc and cudaFree of a process, one line each, for the GPU proof's memory record.
 *
 * Built by the payload (benchmarks/gpuproof/allocations.py) into an LD_PRELOAD library with the
 * system C compiler: the two CUDA runtime functions are declared here by hand, so no CUDA header
 * is needed to build it. Loaded first, its definitions take the place of libcudart's for every
 * library that links libcudart dynamically and calls these through the dynamic linker (libcaffe
 * does: SyncedMemory's blobs, the cuDNN workspaces Caffe allocates itself); the real functions are
 * found with dlsym(RTLD_NEXT). Allocations that cuBLAS, cuDNN, cuRAND or NCCL make inside
 * themselves (their own statically linked runtime, or the driver API) do not pass through here.
 *
 * With CUDAMALLOC_LOG naming a file, each call appends one line to it with a single write(2) (so
 * threads' lines do not mix):
 *     malloc BYTES POINTER STATUS
 *     free 0 POINTER STATUS
 * Without the variable nothing is written and the calls pass straight through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int log_fd = -1;
static malloc_fn real_malloc;
static free_fn real_free;

static void start(void) {
    const char *path = getenv("CUDAMALLOC_LOG");
    real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
    real_free = (free_fn)dlsym(RTLD_NEXT, "cudaFree");
    if (path != NULL && *path != '\0')
        log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static void record(const char *op, size_t bytes, const void *ptr, int status) {
    char line[128];
    int n;
    if (log_fd < 0)
        return;
    n = snprintf(line, sizeof line, "%s %zu %p %d\n", op, bytes, ptr, status);
    if (n > 0 && (size_t)n < sizeof line && write(log_fd, line, (size_t)n) < 0)
        return;  /* a lost line is visible as an unmatched free; the process must not fail for it */
}

int cudaMalloc(void **ptr, size_t bytes) {
    int status;
    pthread_once(&once, start);
    if (real_malloc == NULL)
        return 3;  /* cudaErrorInitializationError: no CUDA runtime below this library */
    status = real_malloc(ptr, bytes);
    record("malloc", bytes, status == 0 ? *ptr : NULL, status);
    return status;
}

int cudaFree(void *ptr) {
    int status;
    pthread_once(&once, start);
    if (real_free == NULL)
        return 3;
    status = real_free(ptr);
    record("free", 0, ptr, status);
    return status;
}
