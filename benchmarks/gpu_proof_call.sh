#!/usr/bin/env bash
# One call of the GPU proof on the GPU machine (its own Python, nothing fetched): installs the
# payload's wheels beside that Python and runs the groups named, results under $OUT.
#   bash benchmarks/gpu_proof_call.sh training,torch,memory 540   # carry build/gpu-proof/{common,data,baseline}
#   bash benchmarks/gpu_proof_call.sh pycaffe,gtest 540 build/gpu-proof/gtest/done.txt
#       # carry build/gpu-proof/{common,gtest,pycaffe}
# The third argument (gtest only): the tests finished in earlier calls; this call runs the rest and
# leaves the updated list in $OUT/gtest_done.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
groups=${1:?groups, e.g. training,torch,memory}
budget=${2:-520}
done_list=${3:-}
out=${OUT:?OUT names the folder whose files come back}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-proof-site \
    build/gpu-proof/common/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/gpu-proof-site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv,noheader
python3 benchmarks/gpu_proof.py run --payload build/gpu-proof --out "$out" --groups "$groups" --budget "$budget" \
    ${done_list:+--done "$done_list"} > "$out/run.log" 2>&1
status=$?
tail -n 60 "$out/run.log"
exit $status
