"""The GPU proof (``benchmarks/gpu_proof.py``): payload made here, steps run on the GPU machine, report."""
