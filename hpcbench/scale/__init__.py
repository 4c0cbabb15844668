"""The scale model: alpha-beta links, algorithms' byte counts, platforms, predictions.

Pure library, no torch.distributed: :mod:`~hpcbench.scale.alpha_beta` fits links from
``collectives`` records, :mod:`~hpcbench.scale.algorithms` counts what each reduction sends per
link level, :mod:`~hpcbench.scale.platforms` holds machines as data with sources, and
:mod:`~hpcbench.scale.predict` turns them into step time, communication share and busy share.
"""

from hpcbench.scale.alpha_beta import LinkFit, fit_alpha_beta, fit_from_collectives
from hpcbench.scale.platforms import PLATFORMS, LinkModel, Platform, emulated_cluster, get_platform
from hpcbench.scale.predict import MODE_MODELS, Prediction, predict_c1, predict_step, residuals, within

__all__ = ["LinkFit", "LinkModel", "MODE_MODELS", "PLATFORMS", "Platform", "Prediction", "emulated_cluster",
           "fit_alpha_beta", "fit_from_collectives", "get_platform", "predict_c1", "predict_step", "residuals",
           "within"]
