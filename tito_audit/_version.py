"""The package version, in a module of its own so that the package's modules read it without importing the
package root (whose lazy exports import them back). ``pyproject.toml`` carries the same number for packaging."""

__version__ = "0.1.0"
