"""The package version (a leaf module: every layer may read it)."""

__version__ = "0.2.0"
