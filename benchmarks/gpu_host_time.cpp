// Where a small net's GPU training time goes on the host: for each layer of a
// net, the host microseconds one Forward and one Backward call take when calls
// are queued without waiting for the GPU (what bounds a net whose kernels are
// shorter than their launches), beside the wall microseconds per call once the
// GPU has caught up; then the same for a whole training iteration (clear the
// gradients, forward, backward, update) and for single calls of Caffe's own
// kernel, cuBLAS and a device-wide wait, to calibrate the per-call costs.
//
// Built by benchmarks/gpu_proof.py against the CUDA engine;
// usage: gpu_host_time NET.prototxt CALLS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "caffe/caffe.hpp"
#include "caffe/util/math_functions.hpp"

using caffe::Blob;
using caffe::Caffe;
using caffe::Layer;
using caffe::Net;

typedef std::chrono::steady_clock Clock;

static double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Runs `call` n times back to back: host microseconds per call before the
// final wait, and wall microseconds per call after it.
template <typename F>
static void Measure(const std::string& what, int n, F call) {
  CUDA_CHECK(cudaDeviceSynchronize());
  Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) call();
  Clock::time_point queued = Clock::now();
  CUDA_CHECK(cudaDeviceSynchronize());
  Clock::time_point done = Clock::now();
  std::printf("%-28s host %9.2f us  wall %9.2f us\n", what.c_str(),
              Micros(start, queued) / n, Micros(start, done) / n);
}

int main(int argc, char** argv) {
  ::google::InitGoogleLogging(argv[0]);
  ::google::InstallFailureSignalHandler();
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s NET.prototxt CALLS\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[2]);
  Caffe::SetDevice(0);
  Caffe::set_mode(Caffe::GPU);
  Net<float> net(argv[1], caffe::TRAIN);
  for (int i = 0; i < 3; ++i) {  // algorithms chosen, buffers grown
    net.ClearParamDiffs();
    net.ForwardBackward();
    net.Update();
  }
  const std::vector<boost::shared_ptr<Layer<float> > >& layers = net.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<Blob<float>*>& bottom = net.bottom_vecs()[i];
    const std::vector<Blob<float>*>& top = net.top_vecs()[i];
    const std::string name = net.layer_names()[i];
    Measure(name + " forward", n, [&] { layers[i]->Forward(bottom, top); });
    const std::vector<bool>& down = net.bottom_need_backward()[i];
    Measure(name + " backward", n,
            [&] { layers[i]->Backward(top, down, bottom); });
  }
  Measure("iteration", n, [&] {
    net.ClearParamDiffs();
    net.ForwardBackward();
    net.Update();
  });
  Blob<float> blob(1, 1, 1, 1024);
  float* x = blob.mutable_gpu_data();
  float* y = blob.mutable_gpu_diff();
  float result = 0;
  Measure("caffe_gpu_set (a kernel)", n,
          [&] { caffe::caffe_gpu_set(1024, 0.f, x); });
  Measure("caffe_gpu_axpy (cuBLAS)", n,
          [&] { caffe::caffe_gpu_axpy(1024, 0.5f, x, y); });
  Measure("caffe_gpu_gemm 32^3 (cuBLAS)", n, [&] {
    caffe::caffe_gpu_gemm(CblasNoTrans, CblasNoTrans, 32, 32, 1, 1.f, x, x,
                          0.f, y);
  });
  Measure("caffe_gpu_asum (waits)", n,
          [&] { caffe::caffe_gpu_asum(1024, x, &result); });
  Measure("cudaDeviceSynchronize", n,
          [&] { CUDA_CHECK(cudaDeviceSynchronize()); });
  return 0;
}
