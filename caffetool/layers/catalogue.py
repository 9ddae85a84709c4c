"""Every Caffe layer type caffetool knows, each declared once (:mod:`caffetool.layers.entry`), and the
look-ups the memory estimate and the exports make in it.

The types are the :class:`~caffetool.layers.entry.LayerType` subclasses of the family modules in
:data:`FAMILIES`, keyed by their names; a type of the engine's registry (``caffe.layer_type_list()``)
that is missing here, or declared without some capability, fails the tests by name. A type nobody
declared (a layer of a fork the engine lacks) has no entry: each look-up says so with None.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from caffetool.layers import (convolutions, detection, losses, neurons, normalizing, pooling, recurrent, shaping,
                             sources)
from caffetool.layers.entry import CAPABILITIES, LayerType, Omitted, Refused, Sourced

FAMILIES: tuple[ModuleType, ...] = (sources, convolutions, pooling, neurons, normalizing, shaping, losses, recurrent,
                                    detection)


def declared(family: ModuleType) -> list[type[LayerType]]:
    """The layer types a family module declares, in its order."""
    return [value for value in vars(family).values()
            if isinstance(value, type) and issubclass(value, LayerType) and value.__module__ == family.__name__]


CATALOGUE: dict[str, type[LayerType]] = {kind.name(): kind for family in FAMILIES for kind in declared(family)}


def entry(type_name: str) -> type[LayerType] | None:
    """The declaration of ``type_name``, or None for a type the catalogue does not know."""
    return CATALOGUE.get(type_name)


def declaration(type_name: str, capability: str) -> Any:
    """What the catalogue declares of ``type_name`` for ``capability`` (a function, :class:`Refused`,
    :class:`Omitted` or :class:`Sourced`); None for an unknown type or an undeclared capability."""
    kind = CATALOGUE.get(type_name)
    return getattr(kind, capability, None) if kind is not None else None


def translation(type_name: str, capability: str) -> Callable[..., Any] | None:
    """The function that does ``capability`` for ``type_name``; None where it is refused, omitted,
    a data source's or unknown."""
    found = declaration(type_name, capability)
    return None if found is None or isinstance(found, (Refused, Omitted, Sourced)) else found


def refusal(type_name: str, capability: str) -> str | None:
    """Why ``type_name`` is refused ``capability``; None where it is not refused (or unknown)."""
    found = declaration(type_name, capability)
    return found.why if isinstance(found, Refused) else None


def omitted(type_name: str, capability: str) -> bool:
    """Whether ``capability`` covers ``type_name`` by writing nothing for it (an exported ``Input``)."""
    return isinstance(declaration(type_name, capability), Omitted)


def source(type_name: str) -> Sourced | None:
    """The data source that shapes a data layer's tops; None for every other type."""
    found = declaration(type_name, "memory")
    return found if isinstance(found, Sourced) else None


def is_loss(type_name: str) -> bool:
    kind = CATALOGUE.get(type_name)
    return bool(kind is not None and kind.loss)


def missing(kind: type[LayerType]) -> list[str]:
    """The capabilities ``kind`` declares neither way (neither done nor refused)."""
    return [capability for capability in CAPABILITIES if getattr(kind, capability, None) is None]


def covered(type_name: str, capability: str) -> bool:
    """Whether the project does ``capability`` for ``type_name`` (by code, a data source, or by writing nothing)."""
    found = declaration(type_name, capability)
    return found is not None and not isinstance(found, Refused)


def gaps(type_names: list[str]) -> list[str]:
    """What the catalogue lacks for ``type_names`` (an engine's registry): each type it does not
    declare, and each capability a declared type gives neither a function nor a reason for."""
    found = []
    for name in sorted(type_names):
        kind = CATALOGUE.get(name)
        if kind is None:
            found.append(f"{name}: not declared in the layer catalogue (caffetool/layers/)")
        elif lacking := missing(kind):
            found.append(f"{name}: declares no {', no '.join(lacking)} (a function, or Refused with the reason)")
    return found
