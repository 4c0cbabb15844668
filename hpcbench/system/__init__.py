"""Facts about the machine and the launch: the inventory probes (:mod:`inventory`) and the facts that decide applicability (:mod:`facts`)."""
