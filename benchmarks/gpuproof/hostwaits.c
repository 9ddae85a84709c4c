/* How often a process made its host wait for the GPU: the CUDA runtime's and cuBLAS's blocking
 * calls, counted, written at exit. For the GPU proof's claim that a training iteration makes none.
 *
 * Built by the payload (benchmarks/gpuproof/waits.py) into an LD_PRELOAD library with the system C
 * compiler; the functions are declared here by hand, so no CUDA header is needed. libcaffe links
 * libcudart and libcublas dynamically, so its calls come here first; the real functions are found
 * with dlsym(RTLD_NEXT). Counted:
 *   - cudaMemcpy (legacy stream) and cudaMemcpy_ptds (a thread's own stream), by where the two
 *     buffers are (cudaPointerGetAttributes): host<-device, device<-host, device<-device. Only
 *     the first two wait on the host; a copy between two device buffers does not;
 *   - cudaDeviceSynchronize, cudaStreamSynchronize(_ptsz), cudaEventSynchronize;
 *   - cuBLAS's reductions that return their result to host memory (Caffe's caffe_gpu_asum and
 *     caffe_gpu_dot): cublas{S,D}{asum,dot}_v2.
 * Waits inside cuBLAS, cuDNN or NCCL that do not pass through these calls are not seen.
 *
 * With HOSTWAITS_LOG naming a file, the counts are written there at exit, one "name count" line
 * each. Without it the calls pass straight through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* cudaPointerAttributes as CUDA 11 and later lay it out: the memory type comes first. */
struct pointer_attributes {
    int type; /* 0 unregistered host, 1 host, 2 device, 3 managed */
    int device;
    void *device_pointer;
    void *host_pointer;
};

enum counter {
    COPY_TO_HOST, COPY_TO_DEVICE, COPY_DEVICE_TO_DEVICE, COPY_HOST_TO_HOST,
    DEVICE_SYNCHRONIZE, STREAM_SYNCHRONIZE, EVENT_SYNCHRONIZE, CUBLAS_TO_HOST, COUNTERS
};
static const char *const names[COUNTERS] = {
    "memcpy_device_to_host", "memcpy_host_to_device", "memcpy_device_to_device", "memcpy_host_to_host",
    "device_synchronize", "stream_synchronize", "event_synchronize", "cublas_result_to_host",
};
static unsigned long counts[COUNTERS];

static void count(enum counter which) { __atomic_add_fetch(&counts[which], 1, __ATOMIC_RELAXED); }

static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "hostwaits: %s not found below this library\n", name);
        abort();
    }
    return f;
}

static int on_device(const void *pointer) {
    typedef int (*attributes_fn)(struct pointer_attributes *, const void *);
    static attributes_fn attributes;
    struct pointer_attributes a = {0, 0, NULL, NULL};
    if (attributes == NULL)
        attributes = (attributes_fn)real("cudaPointerGetAttributes");
    return attributes(&a, pointer) == 0 && (a.type == 2 || a.type == 3);
}

static void count_copy(void *dst, const void *src) {
    int to = on_device(dst), from = on_device(src);
    count(to && from ? COPY_DEVICE_TO_DEVICE : to ? COPY_TO_DEVICE : from ? COPY_TO_HOST : COPY_HOST_TO_HOST);
}

#define COPY(name)                                                                      \
    int name(void *dst, const void *src, size_t bytes, int kind) {                     \
        static int (*f)(void *, const void *, size_t, int);                             \
        if (f == NULL)                                                                   \
            f = (int (*)(void *, const void *, size_t, int))real(#name);               \
        count_copy(dst, src);                                                            \
        return f(dst, src, bytes, kind);                                                 \
    }
COPY(cudaMemcpy)
COPY(cudaMemcpy_ptds)

#define WAIT(name, counter, type)                                                       \
    int name(type handle) {                                                             \
        static int (*f)(type);                                                          \
        if (f == NULL)                                                                   \
            f = (int (*)(type))real(#name);                                             \
        count(counter);                                                                  \
        return f(handle);                                                                \
    }
WAIT(cudaStreamSynchronize, STREAM_SYNCHRONIZE, void *)
WAIT(cudaStreamSynchronize_ptsz, STREAM_SYNCHRONIZE, void *)
WAIT(cudaEventSynchronize, EVENT_SYNCHRONIZE, void *)

int cudaDeviceSynchronize(void) {
    static int (*f)(void);
    if (f == NULL)
        f = (int (*)(void))real("cudaDeviceSynchronize");
    count(DEVICE_SYNCHRONIZE);
    return f();
}

#define REDUCE(name, type)                                                              \
    int name(void *handle, int n, const type *x, int incx, type *result) {             \
        static int (*f)(void *, int, const type *, int, type *);                        \
        if (f == NULL)                                                                   \
            f = (int (*)(void *, int, const type *, int, type *))real(#name);          \
        count(CUBLAS_TO_HOST);                                                           \
        return f(handle, n, x, incx, result);                                            \
    }
REDUCE(cublasSasum_v2, float)
REDUCE(cublasDasum_v2, double)

#define DOT(name, type)                                                                 \
    int name(void *handle, int n, const type *x, int incx, const type *y, int incy,     \
             type *result) {                                                            \
        static int (*f)(void *, int, const type *, int, const type *, int, type *);     \
        if (f == NULL)                                                                   \
            f = (int (*)(void *, int, const type *, int, const type *, int, type *))real(#name); \
        count(CUBLAS_TO_HOST);                                                           \
        return f(handle, n, x, incx, y, incy, result);                                   \
    }
DOT(cublasSdot_v2, float)
DOT(cublasDdot_v2, double)

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("HOSTWAITS_LOG");
    FILE *out;
    int i;
    if (path == NULL || *path == '\0' || (out = fopen(path, "w")) == NULL)
        return;
    for (i = 0; i < COUNTERS; ++i)
        fprintf(out, "%s %lu\n", names[i], __atomic_load_n(&counts[i], __ATOMIC_RELAXED));
    fclose(out);
}
