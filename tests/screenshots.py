"""The documentation's screenshots: each image under ``docs/images`` and the browser test that takes it.

The tests take these screenshots of the real pages in a real browser every time they run, so a page
that stops rendering fails them. With ``CAFFETOOL_SCREENSHOTS=FOLDER`` they also write each one into
FOLDER under its name; ``CAFFETOOL_SCREENSHOTS=docs/images`` remakes the documentation's pictures.
The table is the one list of those names: ``tests/test_docs_images.py`` holds the pages to it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

VARIABLE = "CAFFETOOL_SCREENSHOTS"
DEMO_PAGE = "tests/test_demo_page.py"
SWEEP_HPARAMS = "tests/test_sweep_hparams.py"

# image name -> the test that takes it ("module::test", as pytest names it)
IMAGES: dict[str, str] = {
    "demo-upload.png": f"{DEMO_PAGE}::test_browser_first_view_then_one_upload",
    "demo-drawing.png": f"{DEMO_PAGE}::test_browser_a_drawing_is_classified",
    "run-page.png": f"{DEMO_PAGE}::test_browser_run_page_shows_curves_and_the_confusion_matrix",
    "training-curves.png": f"{DEMO_PAGE}::test_browser_run_page_shows_curves_and_the_confusion_matrix",
    "confusion-matrix.png": f"{DEMO_PAGE}::test_browser_run_page_shows_curves_and_the_confusion_matrix",
    "tensorboard-hparams.png": f"{SWEEP_HPARAMS}::test_the_dashboard_lists_every_trial_in_a_browser",
    "mlflow-sweep.png": f"{SWEEP_HPARAMS}::test_mlflow_shows_the_sweep_with_its_trials_nested_in_a_browser",
}
SMALLEST = 10_000  # bytes: a PNG of a rendered page or figure, not of a blank area


def save(target: Any, name: str, **options: Any) -> bytes:
    """Screenshot of ``target`` (a Playwright page, or a locator for one element), checked and, when
    ``CAFFETOOL_SCREENSHOTS`` names a folder, written there as ``name``. ``options`` go to Playwright's
    ``screenshot`` (``full_page=True`` for a page)."""
    taker = IMAGES.get(name)
    assert taker is not None, f"{name} is not in tests/screenshots.py's IMAGES"
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0].split("[")[0]
    assert current.endswith(taker), f"{name} is taken by {taker} (IMAGES), not by {current}"
    png = target.screenshot(animations="disabled", **options)
    assert png.startswith(b"\x89PNG") and len(png) > SMALLEST, (name, len(png))
    if folder := os.environ.get(VARIABLE):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / name).write_bytes(png)
    return png
