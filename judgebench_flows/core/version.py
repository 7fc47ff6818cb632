"""The package's version in the lowest layer, where every layer may read it: a run records the version
that wrote its results (judging/provenance.py) without importing the package's root, which hands the
same value on as `judgebench_flows.__version__`. It changes with pyproject.toml's `version`."""

from __future__ import annotations

VERSION = "0.1.0"
