"""``memory.fit``: the largest batch that fits a GPU, and what to change when the wanted one does not.

Every answer comes from the estimator in GPU mode: the batch from ``memory = fixed + batch x
per-sample`` (checked with a full estimate, and never past what Caffe can build: INT_MAX elements
per blob), each change by estimating the changed net. Changes are ranked by the bytes they save,
each with its cost. Splitting the batch over ``iter_size`` passes is only offered in a form that
keeps batch x iter_size equal to what was asked, so the advice never changes the training recipe.
A card with no memory left after the reserve is refused: no batch could be an answer. A net with
layers the estimator does not model gets lower bounds: its largest batch is an upper limit, and the
answer says which layers were not counted.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from caffetool.errors import ConfigError
from caffetool.memory import estimator

PCIE_BYTES_PER_S = 12e9  # PCIe 3.0 x16, what vDNN-style offload can use in practice


@dataclass
class Change:
    name: str
    saves: int
    cost: str
    fits: bool


@dataclass
class Fit:
    capacity: int
    reserve: int
    largest_batch: int
    wanted_batch: int
    wanted_bytes: int
    fits: bool
    changes: list[Change]
    blob_limit_batch: int = 0  # the largest batch Caffe can build at all (INT_MAX elements per blob)
    unmodelled: list[tuple[str, str, str]] = field(default_factory=list)  # the estimate's; then every figure is a lower bound

    @property
    def limited_by_blobs(self) -> bool:
        """Whether Caffe's blob limit, not the card's memory, sets the largest batch."""
        return 0 < self.largest_batch == self.blob_limit_batch


def largest_batch(net: Any, options: estimator.Options, budget: int, text: str | None = None) -> int:
    """The largest batch within ``budget`` bytes that Caffe can also build (0 when none fits)."""
    fixed, per_sample = estimator.per_sample(net, options, text)
    if per_sample <= 0 or fixed > budget:
        return 0
    batch = min(max(0, (budget - fixed) // per_sample), estimator.largest_buildable_batch(net, options, text))
    while batch > 0 and estimator.estimate(net, replace(options, batch=batch), text).total > budget:
        batch -= 1
    return int(batch)


def fit(net: Any, options: estimator.Options, capacity: int, reserve: int, text: str | None = None) -> Fit:
    """Whether the asked batch fits ``capacity`` bytes less ``reserve``, and the changes if it does not."""
    check_budget(capacity, reserve)
    options = replace(options, mode="gpu")
    budget = capacity - reserve
    wanted = estimator.estimate(net, options, text)
    batch = wanted.rows[0].top[0] if wanted.rows and wanted.rows[0].top else (options.batch or 1)
    best = largest_batch(net, options, budget, text)
    changes = [] if wanted.total <= budget else _changes(net, options, wanted, batch, best, budget, text)
    return Fit(capacity, reserve, best, batch, wanted.total, wanted.total <= budget,
               sorted(changes, key=lambda c: -c.saves), estimator.largest_buildable_batch(net, options, text),
               wanted.unmodelled)


def check_budget(capacity: int, reserve: int) -> None:
    """Refuse a card that leaves nothing for the net: "largest batch 0" would be no answer at all."""
    if capacity <= 0:
        raise ConfigError("--gpu-memory must be more than 0 bytes: give the card's memory, e.g. 12GiB")
    if reserve >= capacity:
        raise ConfigError(f"--reserve {_size(reserve)} leaves nothing of the card's {_size(capacity)} "
                          "(--gpu-memory); give the card's real size (e.g. 12GiB) or a smaller --reserve")


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n:,} byte{'' if n == 1 else 's'}"


def exact_split(batch: int, largest: int) -> tuple[int, int]:
    """(smaller batch, iter_size) with smaller x iter_size == ``batch`` exactly: the smallest
    iter_size that divides the batch and leaves a part no larger than ``largest`` (>= 1).

    Rounding up instead (51 x 3 = 153 for 128) would train with another effective batch, and so
    another learning-rate schedule, than the one asked for.
    """
    k = next(k for k in range(1, batch + 1) if batch % k == 0 and batch // k <= largest)
    return batch // k, k


def _changes(net: Any, o: estimator.Options, wanted: estimator.Estimate, batch: int, best: int, budget: int,
             text: str | None) -> list[Change]:
    out = []
    total = wanted.total
    if best >= 1:
        out.append(_split_batch(net, o, total, batch, best, budget, text))
    half = estimator.estimate(net, replace(o, dtype="fp16"), text).total
    out.append(Change("fp16 storage for weights, gradients and activations", total - half,
                      "needs an fp16-capable Caffe (BVLC stores fp32); watch small gradients (loss scaling)",
                      half <= budget))
    inplace = _in_place_savings(wanted)
    out.append(Change("in-place activations (ReLU, Dropout, BatchNorm, Scale)", inplace,
                      "none for these layers" if inplace else "already in place in this net", total - inplace <= budget))
    feature = wanted.groups["feature maps"] + wanted.groups["gradient maps"]
    live = _largest_live(wanted)
    offload_saves = max(0, feature - live)
    traffic = 2 * sum(r.data_bytes for r in wanted.rows)
    out.append(Change("offload feature maps to host memory between forward and backward (vDNN)", offload_saves,
                      f"{traffic / 1e9:.2f} GB over PCIe per iteration, about {traffic / PCIE_BYTES_PER_S * 1e3:.0f} ms "
                      "at 12 GB/s unless overlapped with compute; not in BVLC Caffe", total - offload_saves <= budget))
    fc = _shrink_fc(net, o, text, total, budget)
    if fc:
        out.append(fc)
    return [c for c in out if c.saves > 0] + [c for c in out if c.saves <= 0]


def _split_batch(net: Any, o: estimator.Options, total: int, batch: int, best: int, budget: int,
                 text: str | None) -> Change:
    """The asked effective batch (batch x iter_size) as more passes of a batch that fits."""
    effective = batch * o.iter_size
    part, k = exact_split(effective, best)
    smaller = estimator.estimate(net, replace(o, batch=part, iter_size=k), text).total
    return Change(f"batch {part} with iter_size {k} ({part} x {k} = {effective}, the same effective batch)",
                  total - smaller, f"{k} forward/backward passes per update instead of {o.iter_size}; the same "
                  f"gradient (BatchNorm statistics would see batches of {part})", smaller <= budget)


def _in_place_savings(e: estimator.Estimate) -> int:
    kinds = {"ReLU", "Dropout", "BatchNorm", "Scale", "Sigmoid", "TanH"}
    return sum(r.data_bytes + r.diff_bytes for r in e.rows if r.type in kinds)


def _largest_live(e: estimator.Estimate) -> int:
    """vDNN's peak: the biggest layer's input and output, data and gradient, kept on the device."""
    rows = e.rows
    best = 0
    for prev, row in zip(rows, rows[1:]):
        best = max(best, prev.data_bytes + prev.diff_bytes + row.data_bytes + row.diff_bytes)
    return best


def _shrink_fc(net: Any, o: estimator.Options, text: str | None, total: int, budget: int) -> Change | None:
    """Shrink the two widest hidden InnerProduct layers to a quarter of their outputs."""
    ips = [layer for layer in net.layer if layer.type == "InnerProduct"]
    hidden = sorted(ips[:-1], key=lambda layer: -layer.inner_product_param.num_output)[:2]
    if not hidden:
        return None
    smaller = copy.deepcopy(net)
    names = {layer.name for layer in hidden}
    for layer in smaller.layer:
        if layer.name in names:
            layer.inner_product_param.num_output = max(1, layer.inner_product_param.num_output // 4)
    after = estimator.estimate(smaller, o).total
    what = ", ".join(f"{layer.name} {layer.inner_product_param.num_output}->{max(1, layer.inner_product_param.num_output // 4)}"
                     for layer in hidden)
    return Change(f"shrink the fully-connected layers ({what})", total - after,
                  "fewer parameters: retrain (or fine-tune) and re-check accuracy; pooling more before them "
                  "(global average pooling, as GoogLeNet does) removes most of them", after <= budget)

