"""Sweeps: many trainings at once on Ray Tune (see :mod:`caffetool.sweep.launch`)."""
