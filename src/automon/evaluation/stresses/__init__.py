"""The built-in stresses, one module each; importing this package registers them in STRESSES
(automon.evaluation.transforms holds the Stress type and the registry)."""

from automon.evaluation.transforms import STRESSES, Stress, get_stress, register, stress
from automon.evaluation.stresses import claim, inject, obfuscate, paraphrase  # noqa: F401  (registers them)

__all__ = ["STRESSES", "Stress", "get_stress", "register", "stress"]
