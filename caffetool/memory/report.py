"""``memory.report``: the figures the seeds quote, recomputed by the estimator and set side by side.

The training figures are the TRAIN net on the GPU with SGD and momentum, without the solver's TEST
net (the seeds do not count one). Each seed counts less than Caffe allocates; the explanation says
what it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from caffetool.memory import estimate as est

MB = 1024**2
GB = 1024**3


@dataclass
class SeedFigure:
    what: str
    theirs: str
    ours: str
    why: str


def dense_params_rule(card_mb: int = 6144, reserve_mb: int = 400, copies: int = 2) -> int:
    """The seed's rule of thumb: parameters of the largest dense net that fits a card."""
    return (card_mb - reserve_mb) * 1024 * 1024 // (4 * copies)


def figures(nets: dict) -> list[SeedFigure]:
    """``nets``: {"alexnet": (net, Options), "vgg16": (net, Options)} for GPU-mode training."""
    out = []
    alex_net, alex_o = nets["alexnet"]
    alex = est.estimate(alex_net, replace(alex_o, batch=128, mode="gpu", test_net=False))
    out.append(SeedFigure(
        "AlexNet, batch 128, training", "about 1.1 GB", _gb(alex.total),
        f"ours: weights, gradients and momentum {_gb(alex.groups['model'])}, feature maps "
        f"{_gb(alex.groups['feature maps'])}, gradient maps {_gb(alex.groups['gradient maps'])}, workspace "
        f"{_gb(alex.groups['workspace'])}; the seed's figure covers feature maps and weights once, without "
        "Caffe's separate gradient blobs, the solver history and the test net"))
    vgg_net, vgg_o = nets["vgg16"]
    for batch, theirs in ((128, "about 14 GB"), (256, "about 28 GB")):
        v = est.estimate(vgg_net, replace(vgg_o, batch=batch, mode="gpu", test_net=False))
        out.append(SeedFigure(
            f"VGG-16, batch {batch}, training", theirs, _gb(v.total),
            f"feature maps {_gb(v.groups['feature maps'])} and gradient maps {_gb(v.groups['gradient maps'])} "
            f"grow with the batch, the model {_gb(v.groups['model'])} does not; vDNN's figure is the network's "
            "own need, Caffe adds the im2col workspace, pooling indices and dropout masks"))
    rule = dense_params_rule()
    momentum = dense_params_rule(copies=3)
    out.append(SeedFigure(
        "largest dense net on a 6 GB card (400 MB reserve)", f"{dense_params_rule():,} parameters",
        f"{rule:,} (weights + gradients); {momentum:,} with SGD momentum",
        "the rule counts 4 bytes x 2 copies per parameter; Caffe's SGD with momentum keeps a third copy "
        "(the history) and Adam a fourth and fifth, and activations come on top"))
    return out


def _gb(n: int) -> str:
    return f"{n / GB:.2f} GiB"
