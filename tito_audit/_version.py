"""The package version, in a module of its own so that the package's modules read it without importing the
package root (whose lazy exports import them back). Packaging reads it from here too (``pyproject.toml``'s
dynamic version), so the number is written once."""

__version__ = "0.1.0"
