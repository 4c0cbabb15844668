"""ResNets from torchvision, randomly initialised (``weights=None``: nothing is downloaded).

``resnet50`` is the guide's model (C3). ``resnet_tiny`` keeps torchvision's ResNet code
with one BasicBlock per stage (about 4.9 M parameters), so that CPU tests and demos
exercise the same layer types (convolutions, BatchNorm) in seconds.
"""

from __future__ import annotations

import torch.nn as nn


def resnet50(num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-50 (25.6 M parameters with 1000 classes), random init."""
    from torchvision.models import resnet50 as tv_resnet50

    return tv_resnet50(weights=None, num_classes=num_classes)


def resnet18(num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-18 (11.7 M parameters with 1000 classes), random init."""
    from torchvision.models import resnet18 as tv_resnet18

    return tv_resnet18(weights=None, num_classes=num_classes)


def resnet_tiny(num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet with one BasicBlock per stage: a CPU-sized ResNet."""
    from torchvision.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes)
