"""What every part of hpcbench shares: typed configs, registries, the error root, units,
the one results schema, derived metrics and the constants of the world (:mod:`facts`)."""
