"""Invoke entry point: `invoke --list` shows every task. All logic lives in the caffetool package."""

from pathlib import Path

from caffetool.tasks import check_project_settings, ns  # noqa: F401  (Invoke loads the collection named `ns`)

check_project_settings(Path(__file__).parent)  # before Invoke itself reads invoke.yaml
