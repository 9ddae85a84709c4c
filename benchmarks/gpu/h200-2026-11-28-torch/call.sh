set -o pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
D=.gpudata
for mode in eager graphs eager graphs; do
  extra=""; [ $mode = graphs ] && extra="--cuda-graphs"
  s=$SECONDS; python3 benchmarks/torch_lenet.py --device cuda --iters 10000 --images $D/train-images-idx3-ubyte.gz --labels $D/train-labels-idx1-ubyte.gz --test-images $D/t10k-images-idx3-ubyte.gz --test-labels $D/t10k-labels-idx1-ubyte.gz $extra > $OUT/torch_$mode.json.tmp 2> $OUT/torch_$mode.err; echo "$mode rc=$? wall $((SECONDS-s)) s"
  cat $OUT/torch_$mode.json.tmp >> $OUT/torch_$mode-runs.jsonl; python3 -c "import sys,json; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); d.pop(\"losses\",None); print(d)" $OUT/torch_$mode.json.tmp; tail -3 $OUT/torch_$mode.err
done
rm -f $OUT/*.tmp
