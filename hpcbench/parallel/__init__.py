"""Data parallelism: communication modes (:mod:`modes`) and DDP communication hooks (:mod:`hooks`)."""
