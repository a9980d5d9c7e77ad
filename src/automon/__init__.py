"""automon: build, train and audit LLM misbehavior monitors.

Importing the package is cheap: heavy libraries (torch, transformers, vllm, unsloth) are imported
inside the functions that need them.
"""

__version__ = "0.1.0"
