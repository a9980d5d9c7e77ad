"""Data build: sources -> recipes -> paired test split + disjoint train split -> manifest."""
