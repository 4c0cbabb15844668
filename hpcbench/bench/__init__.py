"""Benchmarks of hpcbench itself: ratios measured side by side in one run, never timed test assertions."""
