"""SC-JEPA model: config, parts, and the composed model."""

from model.codebook import SoftCodebook
from model.config import ModelConfig
from model.scjepa import SCJEPA, TargetEncoder

__all__ = ["SCJEPA", "ModelConfig", "SoftCodebook", "TargetEncoder"]
