"""PyTorch's side of cpu_speed.py: Caffe's LeNet recipe trained on the CPU, timed as Caffe's log times it.

Run by cpu_speed.py inside its own virtual environment (benchmarks/.venv-torch, torch and numpy
only), so it imports nothing from caffetool. The net, initialisation, data order and update rule
follow Caffe's examples/mnist/lenet_train_test.prototxt and lenet_solver.prototxt:

* conv1 20@5x5 → max-pool 2/2 → conv2 50@5x5 → max-pool 2/2 → ip1 500 → ReLU → ip2 10 →
  SoftmaxWithLoss (the batch mean of the cross-entropy);
* Caffe's ``xavier`` filler: U(-a, a) with a = sqrt(3 / fan_in) (fan_in = inputs per output unit),
  which is not torch's ``xavier_uniform_`` (that one averages fan_in and fan_out); biases 0;
* pixels scaled by 0.00390625; batches taken in file order, wrapping round at the end, as Caffe's
  Data layer reads an LMDB written in file order;
* Caffe's SGD (sgd_solver.cpp): ``v = momentum * v + lr * lr_mult * (grad + weight_decay * w);
  w -= v``, with lr_mult 1 for weights and 2 for biases, and the ``inv`` policy
  ``lr = base_lr * (1 + gamma * iter) ** -power``. torch.optim.SGD applies lr after the momentum
  sum (``v = momentum * v + g; w -= lr * v``), which is the same only while lr is constant, so the
  rule is written out here with the same fused ``_foreach`` kernels torch.optim.SGD uses.

The timed span matches cpu_speed.py's reading of Caffe's log: from the end of iteration 100's
forward/backward to the end of the last one, i.e. ``iters - 100`` iterations after 100 warm-up
steps. Prints one JSON object on stdout.

    benchmarks/.venv-torch/bin/python benchmarks/torch_lenet.py --images I.gz --labels L.gz --iters 1000
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

WARMUP = 100
RECIPE = dict(base_lr=0.01, momentum=0.9, weight_decay=0.0005, gamma=0.0001, power=0.75, batch=64, scale=0.00390625)
# (name, shape) of each learnable blob, Caffe's order; biases are the 1-D ones.
PARAMS = (("conv1.w", (20, 1, 5, 5)), ("conv1.b", (20,)), ("conv2.w", (50, 20, 5, 5)), ("conv2.b", (50,)),
          ("ip1.w", (500, 800)), ("ip1.b", (500,)), ("ip2.w", (10, 500)), ("ip2.b", (10,)))


def read_idx(path: str) -> np.ndarray:
    """An IDX file (LeCun's MNIST format; gzip or not) as an array of its declared shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def init_params(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Caffe's xavier filler for weights (fan_in = count / num), constant 0 for biases."""
    params = {}
    for name, shape in PARAMS:
        if len(shape) == 1:
            p = torch.zeros(shape)
        else:
            bound = math.sqrt(3.0 / math.prod(shape[1:]))
            p = torch.empty(shape).uniform_(-bound, bound, generator=generator)
        params[name] = p.requires_grad_()
    return params


def forward(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = F.max_pool2d(F.conv2d(x, p["conv1.w"], p["conv1.b"]), 2, 2)
    x = F.max_pool2d(F.conv2d(x, p["conv2.w"], p["conv2.b"]), 2, 2)
    x = F.relu(F.linear(x.flatten(1), p["ip1.w"], p["ip1.b"]))
    return F.cross_entropy(F.linear(x, p["ip2.w"], p["ip2.b"]), y)


class CaffeSGD:
    """Caffe's SGD update with momentum, weight decay and per-blob lr_mult (see the module docstring)."""

    def __init__(self, params: dict[str, torch.Tensor]) -> None:
        groups: dict[float, list[torch.Tensor]] = {1.0: [], 2.0: []}
        for p in params.values():
            groups[2.0 if p.dim() == 1 else 1.0].append(p)
        self.groups = [(mult, ps, [torch.zeros_like(p) for p in ps]) for mult, ps in groups.items()]

    @staticmethod
    def rate(iteration: int) -> float:
        """Caffe's ``inv`` policy."""
        return RECIPE["base_lr"] * (1 + RECIPE["gamma"] * iteration) ** -RECIPE["power"]

    @torch.no_grad()
    def step(self, iteration: int) -> None:
        lr = self.rate(iteration)
        for mult, params, history in self.groups:
            grads = torch._foreach_add([p.grad for p in params], params, alpha=RECIPE["weight_decay"])
            torch._foreach_mul_(history, RECIPE["momentum"])
            torch._foreach_add_(history, grads, alpha=lr * mult)
            torch._foreach_sub_(params, history)
            for p in params:
                p.grad = None


def batches(images: torch.Tensor, labels: torch.Tensor, size: int):
    """Consecutive batches in file order, wrapping round as Caffe's Data layer does."""
    start, total = 0, len(images)
    while True:
        end = start + size
        if end <= total:
            yield images[start:end], labels[start:end]
        else:
            index = torch.arange(start, end) % total
            yield images[index], labels[index]
        start = end % total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", required=True)
    parser.add_argument("--labels", required=True)
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.iters <= WARMUP:
        parser.error(f"--iters must be above the {WARMUP} warm-up iterations")
    torch.set_num_threads(args.threads)
    images = torch.from_numpy(read_idx(args.images).astype(np.float32) * RECIPE["scale"]).unsqueeze(1)
    labels = torch.from_numpy(read_idx(args.labels).astype(np.int64))
    params = init_params(torch.Generator().manual_seed(args.seed))
    solver = CaffeSGD(params)
    feed = batches(images, labels, RECIPE["batch"])
    start = time.perf_counter()
    timed_from = None
    losses = []
    for iteration in range(args.iters):
        if iteration == WARMUP:
            timed_from = time.perf_counter()
        x, y = next(feed)
        loss = forward(params, x, y)
        loss.backward()
        solver.step(iteration)
        if iteration % 100 == 0:
            losses.append((iteration, loss.item()))
    end = time.perf_counter()
    span = end - timed_from
    with torch.no_grad():  # Caffe's solver ends with one more forward pass, logged as "Iteration N"
        losses.append((args.iters, forward(params, *next(feed)).item()))
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "iters": args.iters,
                      "timed_iters": args.iters - WARMUP, "timed_s": span,
                      "iters_per_s": (args.iters - WARMUP) / span, "train_s": end - start, "losses": losses}))


if __name__ == "__main__":
    main()
