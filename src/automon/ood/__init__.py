"""Out-of-distribution detectors fused with a monitor (the MOOD paper's recipe).

detectors.py: pure scoring functions (Mahalanobis distance with shrinkage, kNN distance, response
perplexity under a causal LM); fusion.py: standardisation on in-distribution benign samples and the
aggregators (lambda, mean, min); features.py: the pooled hidden states the distance detectors read;
evaluate.py: turns every judge of an evaluation into a fused monitor (a matrix row of its own).
"""

DETECTORS = ("mahalanobis", "knn", "perplexity")
FUSIONS = ("lambda", "mean", "min")
GAUSSIAN_FITS = ("class", "benign")
