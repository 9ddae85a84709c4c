"""Invoke entry point: `invoke --list` shows every task. All logic lives in the caffetool package."""

from caffetool.tasks import ns  # noqa: F401  (Invoke loads the collection named `ns`)
