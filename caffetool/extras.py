"""caffetool's optional parts: which extra of the package brings what, and the one-line refusal of a
task whose extra is not installed.

``pip install caffetool`` brings the main job (the engine's build, data, nets, training with its
progress and plots, evaluation, the demo and its API, the ONNX export); the extras below add the
rest, and ``caffetool[all]`` every one. A task checks its extra before it does anything, by looking
for the packages the extra brings (``importlib.util.find_spec``: nothing is imported, so the check
costs no start-up), so the user reads one line with the ``pip install`` that adds it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from caffetool.errors import ConfigError


@dataclass(frozen=True)
class Extra:
    modules: tuple[str, ...]  # the top-level packages the extra brings, as imported
    brings: str  # as the refusal names it


EXTRAS = {
    "sweep": Extra(("ray", "optuna"), "Ray Tune and Optuna"),
    "mlflow": Extra(("mlflow",), "MLflow"),
    "pytorch": Extra(("torch",), "PyTorch"),
    "notebook": Extra(("ipykernel", "nbclient", "nbformat"), "Jupyter's kernel and notebook runner"),
}


def install_command(extra: str) -> str:
    return f"pip install 'caffetool[{extra}]'"


def missing(extra: str) -> str | None:
    """The first package of ``extra`` that is not installed here, or None when all are."""
    return next((module for module in EXTRAS[extra].modules if importlib.util.find_spec(module) is None), None)


def need(extra: str, what: str, hint: str = "") -> None:
    """Refuse ``what`` (a task, as the user named it) in one line when ``extra`` is not installed."""
    if missing(extra) is not None:
        raise ConfigError(f"{what} needs {EXTRAS[extra].brings}, which {'is' if len(EXTRAS[extra].modules) == 1 else 'are'}"
                          f" not installed here: {install_command(extra)}{hint}")
