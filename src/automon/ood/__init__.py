"""Out-of-distribution detectors fused with a monitor (the MOOD paper's recipe).

detectors.py: pure scoring functions (Mahalanobis distance with shrinkage, kNN distance, response
perplexity under a causal LM); fusion.py: standardisation on in-distribution benign samples and the
aggregators (lambda, mean, min); features.py: the pooled hidden states the distance detectors read;
registry.py: the detectors by name (what `detectors=[...]` accepts); reference.py: a monitor's
in-distribution reference samples, thresholds at reference FARs and fusion gains. The fused monitor
itself (a matrix row of its own) is automon.monitors.fused.FusedMonitor.
"""

from automon.ood.registry import DETECTORS

__all__ = ["DETECTORS", "FUSIONS", "GAUSSIAN_FITS"]
FUSIONS = ("lambda", "mean", "min")
GAUSSIAN_FITS = ("class", "benign")
