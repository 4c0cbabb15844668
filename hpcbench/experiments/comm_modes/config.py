"""Parameters of the ``comm_modes`` experiment (``notebooks/02_comm_modes.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
from hpcbench.core.facts import IB_MTU_BYTES
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.parallel.modes import MODE_NAMES, MODES

#: One InfiniBand MTU (4 KiB) in DDP's bucket_cap_mb unit (MiB): the C17 sweep point.
IB_MTU_BUCKET_MB = IB_MTU_BYTES / (1 << 20)


@dataclass
class CommModesConfig(DistributedConfig):
    """Parameters of ``02_comm_modes``; the notebook's parameters cell mirrors them."""

    models: list[str] = param(["gpt2_tiny", "resnet_tiny"], "models to train (resnet50 and gpt2_124M are the "
                              "guide's; *_tiny keep CPU runs short)", choices=MODEL_NAMES,
                              allowed="non-empty")
    modes: list[str] = param(["ddp", "hybrid_dp_ddp", "hierarchical", "hierarchical_leader"],
                             "communication modes to compare", choices=MODE_NAMES,
                             allowed="non-empty; each supports the nodes x ranks_per_node layout")
    bucket_cap_mb: list[float] = param([25.0], "DDP gradient bucket sizes in MiB (25 is DDP's default; "
                                       "0.00390625 = one 4 KiB IB MTU, the C17 point)",
                                       allowed="a non-empty list, each > 0")
    batch_size: int = param(8, "samples per rank per step (images, or sequences of seq_len tokens)", min=1)
    image_size: int = param(32, "side of the synthetic images (224 for ImageNet-sized ResNet steps)",
                            min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence (1024 for GPT-2 124M)", min=2, max=1024,
                         allowed="at most each text model's block size")
    warmup_steps: int = param(2, "untimed steps per run; the first ones rebuild DDP's buckets", min=0, max=1000)
    steps: int = param(8, "timed steps per run; each one is kept as a sample", min=1, max=100000)
    measure_noop: bool = param(True, "also time each step with a no-op comm hook, interleaved, for the "
                                     "communication share")
    check: bool = param(True, "compare one step's gradients with plain DDP's before timing")
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    trace: bool = param(True, "profile 4 extra untimed steps (1 wait, 1 warm-up, 2 recorded) of the first "
                              "combination that runs and write each rank's Chrome/Perfetto trace to "
                              "<task dir>/trace/<rank>.json, linked from the report; false: no trace")
    nodes: int = param(2, "nodes; on one machine more than 1 is an emulated split of the local ranks",
                       min=1, max=4096)

    def validate(self) -> None:
        if not self.models:
            raise self._error("models", f"is empty; allowed: {list(MODEL_NAMES)}")
        if not self.modes:
            raise self._error("modes", f"is empty; allowed: {list(MODE_NAMES)}")
        if not self.bucket_cap_mb:
            raise self._error("bucket_cap_mb", "is empty; give at least one bucket size in MiB")
        for b in self.bucket_cap_mb:
            if not b > 0:
                raise self._error("bucket_cap_mb", f"{b} is out of range; allowed: > 0 (MiB)")
        if self.nodes * self.ranks_per_node < 2:
            raise self._error("ranks_per_node", "data parallelism needs at least 2 ranks in all "
                                                "(nodes x ranks_per_node)")
        for mode in self.modes:
            problem = MODES.get(mode).layout_problem(self.nodes, self.ranks_per_node)
            if problem:
                raise self._error("modes", f"{mode!r} {problem}")
        for name in self.models:
            spec = MODELS.get(name)
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {name}'s block size {spec.max_seq_len}")
