#!/usr/bin/env bash
# Copy the shared libraries Caffe's binaries and pycaffe need into one folder, so the final
# image needs no -dev packages and no distribution-specific runtime package names.
# Left out: glibc and the compiler runtime (in every base image) and CUDA's own libraries
# (the nvidia/cuda runtime image provides them, matched to its driver stack).
set -euo pipefail
prefix=$1
dest=$2
mkdir -p "$dest"
find "$prefix/bin" "$prefix/lib" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  xargs -0 ldd 2>/dev/null |
  awk '/=> \// { print $3 }' |
  sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
  grep -Ev '/(libcuda|libcudart|libcublas|libcublasLt|libcurand|libcudnn[^/]*|libnccl|libnvidia[^/]*)\.so' |
  grep -v "^$prefix/" |
  while read -r lib; do cp -L "$lib" "$dest/"; done
