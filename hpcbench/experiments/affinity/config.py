"""Parameters of the ``affinity`` experiment (``notebooks/06_affinity.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import ByteSize, DistributedConfig, param
from hpcbench.models import MODEL_NAMES, MODELS

#: The common mistakes of the guide's section 2.3, each timed as a pair against the right way.
#: oversubscription: ranks x intra-op threads above the cores; binding: ranks left unbound;
#: loader: DataLoader workers on the rank's compute cores; hugepages: transparent huge pages
#: ignored for a TLB-bound step; numa: memory on the remote NUMA node.
MISTAKES = ("oversubscription", "binding", "loader", "hugepages", "numa")
#: Mistakes timed in rank 0 alone (one rank and what it owns); the others use every rank.
SINGLE_RANK = ("loader", "hugepages", "numa")
#: Model kinds the DataLoader pair can decode and augment per sample: images.
KINDS = ("image",)


@dataclass
class AffinityConfig(DistributedConfig):
    """Parameters of ``06_affinity``; the notebook's parameters cell mirrors them."""

    nodes: int = param(1, "nodes: binding is a property of one node, so exactly 1", min=1, max=1,
                       allowed="1")
    ranks_per_node: int = param(2, "rank processes on this node (2 on a 2-core machine: 2 ranks x 2 threads is "
                                   "the oversubscription mistake)", min=1, max=64)
    backend: str = param("gloo", "the ranks' process group: gloo, since every pair measures the CPUs",
                         choices=("gloo",))
    mistakes: list[str] = param(list(MISTAKES), "the mistakes to time, each against the right way", choices=MISTAKES,
                                allowed="non-empty, no repeats; oversubscription and binding need "
                                        "ranks_per_node >= 2")
    model: str = param("resnet_tiny", "model of the training steps (oversubscription, binding, loader): resnet_tiny "
                                      "has convolutions large enough for intra-op threads to matter",
                       choices=MODEL_NAMES, allowed="an image model (the DataLoader worker blurs images)")
    batch_size: int = param(8, "samples per training step per rank", min=1, max=4096)
    image_size: int = param(32, "side of the synthetic images of image models", min=16, max=1024)
    warmup_steps: int = param(2, "untimed steps per setting before timing (allocator, OpenMP pool, DDP buckets)",
                              min=0, max=1000)
    steps: int = param(12, "timed steps per setting, the two settings of a pair interleaved step by step; each is "
                           "kept as a sample (a verdict needs >= 5)", min=1, max=100000)
    mistake_threads: int = param(0, "intra-op threads per rank of the oversubscription mistake; 0 = every usable "
                                    "core of the node, what torch takes when OMP_NUM_THREADS is not set", min=0,
                                 max=1024)
    loader_batches: int = param(4, "batches one timed step of the loader pair fetches and trains on (the worker "
                                   "moves between the settings only between steps)", min=1, max=1000)
    sample_work: int = param(20, "3x3 blur passes per sample in the DataLoader worker: the CPU cost of decoding "
                                 "and augmenting; 20 makes a batch of 8 cost ~60 ms to load against ~85 ms to train "
                                 "on (resnet_tiny, one core), so the worker needs a core but not a whole one",
                             min=0, max=1000)
    buffer_bytes: ByteSize = param(ByteSize(1 << 30), "anonymous buffer of each memory-bound setting (hugepages, "
                                                      "numa): 1 GiB of 4 KiB pages needs 2 MiB of page tables, more "
                                                      "than L2 holds, so a TLB miss walks to L3 or DRAM, where "
                                                      "huge pages show their gain",
                                   min=4 << 20, max=64 << 30)
    reads_per_step: int = param(1 << 21, "random 8-byte reads over the buffer per memory-bound step (each likely "
                                         "a TLB miss with 4 KiB pages)", min=1024, max=1 << 30)
    seed: int = param(0, "seed of the weights, the batches and the read pattern", min=0)

    def validate(self) -> None:
        if not self.mistakes or len(set(self.mistakes)) != len(self.mistakes):
            raise self._error("mistakes", f"{self.mistakes}: allowed: a non-empty list of distinct {list(MISTAKES)}")
        multi = [m for m in self.mistakes if m not in SINGLE_RANK]
        if multi and self.ranks_per_node < 2:
            raise self._error("ranks_per_node", f"{multi} compare ranks against each other: they need at least 2 "
                                                f"ranks per node")
        spec = MODELS.get(self.model)
        if spec.kind not in KINDS:
            raise self._error("model", f"{self.model!r} is of kind {spec.kind!r}; allowed kinds: {list(KINDS)}")
