// NCCL on one GPU: the same solver trained twice from the same seed, once by
// Solver::Solve (what `caffe train -gpu 0` runs) and once through
// caffe::NCCL<float>::Run, the path `caffe train -gpu all` takes with more than
// one GPU (parameters gathered into one NCCL buffer, broadcast, gradients
// all-reduced layer by layer on NCCL's stream). With one rank the all-reduce is
// an identity, so every learned weight must come out bit for bit the same.
//
// Built by benchmarks/gpu_proof.py against a CUDA engine with USE_NCCL;
// usage: nccl_one_gpu SOLVER.prototxt. Prints one line per parameter blob and
// a last line "NCCL one GPU: N blobs, M values, K differ, max |diff| D";
// exits 0 when K is 0.
#include <cmath>
#include <cstdio>
#include <vector>

#include "caffe/caffe.hpp"
#include "caffe/parallel.hpp"

using caffe::Blob;
using caffe::Caffe;
using caffe::Solver;
using caffe::SolverParameter;

// The reducer's GPUParams own the device buffers the solver's parameters were
// pointed into (GPUParams::Configure), so it must outlive every read of them,
// as it does in `caffe train`, which keeps it until the solver is done with.
static boost::shared_ptr<Solver<float> > Plain(const SolverParameter& param) {
  boost::shared_ptr<Solver<float> > solver(
      caffe::SolverRegistry<float>::CreateSolver(param));
  solver->Solve();
  return solver;
}

int main(int argc, char** argv) {
  ::google::InitGoogleLogging(argv[0]);
  ::google::InstallFailureSignalHandler();  // a crash prints where it was
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOLVER.prototxt\n", argv[0]);
    return 2;
  }
  SolverParameter param;
  caffe::ReadSolverParamsFromTextFileOrDie(argv[1], &param);
  param.set_solver_mode(SolverParameter::GPU);
  Caffe::SetDevice(param.device_id());
  Caffe::set_mode(Caffe::GPU);
  Caffe::set_solver_count(1);

  boost::shared_ptr<Solver<float> > plain = Plain(param);
  boost::shared_ptr<Solver<float> > reduced(
      caffe::SolverRegistry<float>::CreateSolver(param));
  caffe::NCCL<float> reducer(reduced);
  reducer.Run(std::vector<int>(1, param.device_id()), NULL);
  const std::vector<Blob<float>*>& a = plain->net()->learnable_params();
  const std::vector<Blob<float>*>& b = reduced->net()->learnable_params();
  CHECK_EQ(a.size(), b.size());
  long values = 0, differ = 0;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK_EQ(a[i]->count(), b[i]->count());
    const float* x = a[i]->cpu_data();
    const float* y = b[i]->cpu_data();
    long blob_differ = 0;
    for (int j = 0; j < a[i]->count(); ++j) {
      if (x[j] != y[j]) {
        ++blob_differ;
        worst = std::max(worst, std::fabs(static_cast<double>(x[j]) - y[j]));
      }
    }
    std::printf("blob %zu: %d values, %ld differ\n", i, a[i]->count(),
                blob_differ);
    values += a[i]->count();
    differ += blob_differ;
  }
  std::printf("NCCL one GPU: %zu blobs, %ld values, %ld differ, "
              "max |diff| %g\n", a.size(), values, differ, worst);
  return differ == 0 ? 0 : 1;
}
