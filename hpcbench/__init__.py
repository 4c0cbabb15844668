"""hpcbench: a benchmark and reproduction suite for distributed deep-learning training on
supercomputers. See README.md; the architecture is in hpcbench/README.md, and the techniques
live in modules named after them."""

__version__ = "0.1.0"
