"""Reports: markdown tables, the transfer matrix (CSV/markdown), figures, and the wandb mirror."""
