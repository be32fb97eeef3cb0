"""stpar model zoo: graph-only ONNX files (weights external and absent) of
published transformer configurations, with the op patterns of PyTorch's
ONNX exporter.  Run ``python/stpar-zoo --help``."""

from .archs import build_model
from .presets import ARCHS, PRESETS, Config

__all__ = ["ARCHS", "PRESETS", "Config", "build_model"]
