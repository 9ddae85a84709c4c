"""PyTorch's side of cpu_speed.py and of the GPU proof: Caffe's LeNet recipe, timed as Caffe's log times it.

Run by cpu_speed.py inside its own virtual environment (benchmarks/.venv-torch, torch and numpy
only), and by the GPU proof with the GPU machine's own PyTorch (``--device cuda``), so it imports
nothing from caffetool. The net, initialisation, data order and update rule
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

On a GPU (``--device cuda``) the training set is copied to the device once, before the clock
starts, and each batch is copied from it into the step's input tensors (Caffe's Data layer copies
each batch from pinned host memory in its prefetch thread, off the training path). With
``--cuda-graphs`` the first iterations run eagerly on a side stream (PyTorch's advice before a
capture: cuDNN and cuBLAS pick their algorithms and workspaces), then forward, backward and the
hand-written update are captured once as a CUDA graph and replayed for every later iteration;
the learning rate of the ``inv`` policy lives in a device tensor set before each replay, since a
graph replays the values it was captured with. ``--test-images``/``--test-labels`` add the test
accuracy after training (batches of 100, Caffe's ``test_iter: 100``), outside the timed span.

    benchmarks/.venv-torch/bin/python benchmarks/torch_lenet.py --images I.gz --labels L.gz --iters 1000
    python3 benchmarks/torch_lenet.py --device cuda --cuda-graphs --images I --labels L --iters 10000
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
EAGER_BEFORE_CAPTURE = 3  # eager iterations on a side stream before a CUDA graph is captured
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


def init_params(generator: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Caffe's xavier filler for weights (fan_in = count / num), constant 0 for biases; drawn on the
    CPU (the same numbers for every device), then moved to ``device``."""
    params = {}
    for name, shape in PARAMS:
        if len(shape) == 1:
            p = torch.zeros(shape)
        else:
            bound = math.sqrt(3.0 / math.prod(shape[1:]))
            p = torch.empty(shape).uniform_(-bound, bound, generator=generator)
        if device != "cpu":
            p = p.to(device)
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

    @torch.no_grad()
    def step_on_device(self, lr: torch.Tensor) -> None:
        """The same update with the learning rate read from the device tensor ``lr``, and the
        gradients kept: the form a CUDA graph can replay (see the module docstring)."""
        for mult, params, history in self.groups:
            grads = torch._foreach_add([p.grad for p in params], params, alpha=RECIPE["weight_decay"])
            torch._foreach_mul_(history, RECIPE["momentum"])
            torch._foreach_add_(history, torch._foreach_mul(grads, lr), alpha=mult)
            torch._foreach_sub_(params, history)


def batches(images: torch.Tensor, labels: torch.Tensor, size: int):
    """Consecutive batches in file order, wrapping round as Caffe's Data layer does."""
    start, total = 0, len(images)
    while True:
        end = start + size
        if end <= total:
            yield images[start:end], labels[start:end]
        else:
            index = torch.arange(start, end, device=images.device) % total
            yield images[index], labels[index]
        start = end % total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", required=True)
    parser.add_argument("--labels", required=True)
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--cuda-graphs", action="store_true", help="replay each iteration as a captured CUDA graph")
    parser.add_argument("--test-images", help="test set: its accuracy after training is reported")
    parser.add_argument("--test-labels")
    args = parser.parse_args()
    if args.iters <= WARMUP:
        parser.error(f"--iters must be above the {WARMUP} warm-up iterations")
    if args.cuda_graphs and args.device != "cuda":
        parser.error("--cuda-graphs needs --device cuda")
    if bool(args.test_images) != bool(args.test_labels):
        parser.error("--test-images and --test-labels go together")
    torch.set_num_threads(args.threads)
    images, labels = load(args.images, args.labels, args.device)
    params = init_params(torch.Generator().manual_seed(args.seed), args.device)
    solver = CaffeSGD(params)
    feed = batches(images, labels, RECIPE["batch"])
    train = train_graphed if args.cuda_graphs else train_eager
    start = time.perf_counter()
    timed_from, losses = train(params, solver, feed, args.iters, args.device)
    end = time.perf_counter()
    span = end - timed_from
    with torch.no_grad():  # Caffe's solver ends with one more forward pass, logged as "Iteration N"
        losses.append((args.iters, forward(params, *next(feed)).item()))
    figures = {"torch": torch.__version__, "threads": torch.get_num_threads(), "iters": args.iters,
               "timed_iters": args.iters - WARMUP, "timed_s": span,
               "iters_per_s": (args.iters - WARMUP) / span, "train_s": end - start, "losses": losses}
    if args.device == "cuda":
        figures.update(device=torch.cuda.get_device_name(), cuda_graphs=args.cuda_graphs)
    if args.test_images:
        figures["test_accuracy"] = accuracy(params, *load(args.test_images, args.test_labels, args.device))
    print(json.dumps(figures))


def load(images: str, labels: str, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """An IDX image and label file as scaled float images (N, 1, 28, 28) and int64 labels on ``device``."""
    x = torch.from_numpy(read_idx(images).astype(np.float32) * RECIPE["scale"]).unsqueeze(1)
    y = torch.from_numpy(read_idx(labels).astype(np.int64))
    return (x, y) if device == "cpu" else (x.to(device), y.to(device))


def sync(device: str) -> None:
    """Wait for the device's queued work, so that a clock read counts it (nothing to wait for on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def train_eager(params: dict[str, torch.Tensor], solver: CaffeSGD, feed, iters: int,
                device: str) -> tuple[float, list[tuple[int, float]]]:
    """Every iteration launched from Python: the clock reading at iteration WARMUP, and the losses."""
    timed_from = None
    losses = []
    for iteration in range(iters):
        if iteration == WARMUP:
            sync(device)
            timed_from = time.perf_counter()
        x, y = next(feed)
        loss = forward(params, x, y)
        loss.backward()
        solver.step(iteration)
        if iteration % 100 == 0:
            losses.append((iteration, loss.item()))
    sync(device)
    return timed_from, losses


def train_graphed(params: dict[str, torch.Tensor], solver: CaffeSGD, feed, iters: int,
                  device: str) -> tuple[float, list[tuple[int, float]]]:
    """EAGER_BEFORE_CAPTURE eager iterations on a side stream, then one capture of forward, backward
    and update, replayed for the rest (the module docstring says why each part is so)."""
    losses = []
    lr = torch.zeros((), device=device)
    x, y = next(feed)
    static_x, static_y = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for iteration in range(EAGER_BEFORE_CAPTURE):
            if iteration:
                x, y = next(feed)
            loss = forward(params, x, y)
            loss.backward()
            solver.step(iteration)  # leaves every gradient None: the capture's backward makes its own
            if iteration % 100 == 0:
                losses.append((iteration, loss.item()))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = forward(params, static_x, static_y)
        static_loss.backward()
        solver.step_on_device(lr)
    timed_from = None
    for iteration in range(EAGER_BEFORE_CAPTURE, iters):
        if iteration == WARMUP:
            sync(device)
            timed_from = time.perf_counter()
        x, y = next(feed)
        static_x.copy_(x)
        static_y.copy_(y)
        lr.fill_(solver.rate(iteration))
        graph.replay()
        if iteration % 100 == 0:
            losses.append((iteration, static_loss.item()))
    sync(device)
    return timed_from, losses


@torch.no_grad()
def accuracy(params: dict[str, torch.Tensor], images: torch.Tensor, labels: torch.Tensor, batch: int = 100) -> float:
    """Top-1 accuracy over the whole set, in Caffe's test batches."""
    right = 0
    for start in range(0, len(images), batch):
        x = images[start:start + batch]
        x = F.max_pool2d(F.conv2d(x, params["conv1.w"], params["conv1.b"]), 2, 2)
        x = F.max_pool2d(F.conv2d(x, params["conv2.w"], params["conv2.b"]), 2, 2)
        x = F.relu(F.linear(x.flatten(1), params["ip1.w"], params["ip1.b"]))
        right += int((F.linear(x, params["ip2.w"], params["ip2.b"]).argmax(1) == labels[start:start + batch]).sum())
    return right / len(images)


if __name__ == "__main__":
    main()
