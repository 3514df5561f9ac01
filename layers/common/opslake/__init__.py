"""opslake: a serverless observer for AI agents (shared Lambda layer package)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
