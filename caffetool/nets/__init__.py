"""Nets and solvers: model declarations (``models/``), net and solver builders, validation."""
