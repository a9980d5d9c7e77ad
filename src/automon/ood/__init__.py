"""Out-of-distribution detectors fused with a monitor (the MOOD paper's recipe).

detectors.py: pure scoring functions (Mahalanobis distance with shrinkage, kNN distance, response
perplexity under a causal LM); fusion.py: standardisation on in-distribution benign samples and the
aggregators (lambda, mean, min); features.py: the pooled hidden states the distance detectors read;
registry.py: the detectors by name (what `detectors=[...]` accepts); evaluate.py: turns every judge
of an evaluation into a fused monitor (a matrix row of its own).
"""

from automon.ood.registry import DETECTORS

__all__ = ["DETECTORS", "FUSIONS", "GAUSSIAN_FITS"]
FUSIONS = ("lambda", "mean", "min")
GAUSSIAN_FITS = ("class", "benign")
