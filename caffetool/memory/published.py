"""``memory.report``: published memory figures, recomputed by the estimator and set side by side.

The figures come from two sources: M. Rhu et al., "vDNN: Virtualized Deep Neural Networks for
Scalable, Memory-Efficient Neural Network Design", MICRO 2016 (AlexNet and VGG-16 training), and
T. Dettmers, "Deep learning with GPUs", 2014 (the rule of thumb for the largest dense net a card
holds). The training figures are the TRAIN net on the GPU with SGD and momentum, without the
solver's TEST net (neither source counts one). Each source counts less than Caffe allocates; the
explanation says what it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from caffetool.memory import estimator, netsource

MB = 1024**2
GB = 1024**3
VDNN = 'M. Rhu et al., "vDNN", MICRO 2016'
DETTMERS = 'T. Dettmers, "Deep learning with GPUs", 2014'


@dataclass
class PublishedFigure:
    """One published figure (``theirs``, from ``source``) next to the estimator's (``ours``)."""

    what: str
    source: str
    theirs: str
    ours: str
    why: str


def dense_params_rule(card_mb: int = 6144, reserve_mb: int = 400, copies: int = 2) -> int:
    """Dettmers' rule of thumb: parameters of the largest dense net that fits a card."""
    return (card_mb - reserve_mb) * 1024 * 1024 // (4 * copies)


def published(caffe: Any, models_dir: str | Path | None = None) -> list[PublishedFigure]:
    """The figures for the shipped AlexNet and VGG-16 declarations, as the sources trained them."""
    loaded = {}
    for name in ("alexnet", "vgg16"):
        s = netsource.load(caffe, name, None, None, models_dir, 128)
        loaded[name] = (s.net, estimator.Options(input_shape=s.input_shape, mode="gpu"))
    return figures(loaded)


def figures(nets: dict[str, tuple[Any, estimator.Options]]) -> list[PublishedFigure]:
    """``nets``: {"alexnet": (net, Options), "vgg16": (net, Options)} for GPU-mode training."""
    out = []
    alex_net, alex_o = nets["alexnet"]
    alex = estimator.estimate(alex_net, replace(alex_o, batch=128, mode="gpu", test_net=False))
    out.append(PublishedFigure(
        "AlexNet, batch 128, training", VDNN, "about 1.1 GB", _gb(alex.total),
        f"ours: weights, gradients and momentum {_gb(alex.groups['model'])}, feature maps "
        f"{_gb(alex.groups['feature maps'])}, gradient maps {_gb(alex.groups['gradient maps'])}, workspace "
        f"{_gb(alex.groups['workspace'])}; vDNN's figure covers feature maps and weights once, without "
        "Caffe's separate gradient blobs, the solver history and the test net"))
    vgg_net, vgg_o = nets["vgg16"]
    for batch, theirs in ((128, "about 14 GB"), (256, "about 28 GB")):
        v = estimator.estimate(vgg_net, replace(vgg_o, batch=batch, mode="gpu", test_net=False))
        out.append(PublishedFigure(
            f"VGG-16, batch {batch}, training", VDNN, theirs, _gb(v.total),
            f"feature maps {_gb(v.groups['feature maps'])} and gradient maps {_gb(v.groups['gradient maps'])} "
            f"grow with the batch, the model {_gb(v.groups['model'])} does not; vDNN's figure is the network's "
            "own need, Caffe adds the im2col workspace, pooling indices and dropout masks"))
    rule = dense_params_rule()
    momentum = dense_params_rule(copies=3)
    out.append(PublishedFigure(
        "largest dense net on a 6 GB card (400 MB reserve)", DETTMERS, f"{dense_params_rule():,} parameters",
        f"{rule:,} (weights + gradients); {momentum:,} with SGD momentum",
        "the rule counts 4 bytes x 2 copies per parameter; Caffe's SGD with momentum keeps a third copy "
        "(the history) and Adam a fourth (its second moment), and activations come on top"))
    return out


def _gb(n: int) -> str:
    return f"{n / GB:.2f} GiB"
