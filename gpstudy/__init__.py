"""gpstudy: a reproducible study pipeline for Gaussian-process inference."""

__version__ = "0.1.0"
