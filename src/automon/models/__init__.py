"""Model resolution shared by training and evaluation (lazy heavy imports)."""
