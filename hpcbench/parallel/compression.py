"""Gradient compression as DDP comm hooks (T-case, claim C8): a real 2-bit exchange and PyTorch's baselines.

The guide's tuning case used "2-bit gradient compression in 4 MB buckets with layer-norm
parameters left uncompressed". :data:`COMPRESSIONS` holds that technique and the baselines
it must be compared with, each registered on a DDP model by :func:`apply_compression`:

* ``none``: PyTorch's ``allreduce_hook`` (the same sums as DDP without a hook), counted;
* ``fp16`` / ``bf16``: PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``, counted;
* ``powersgd``: PyTorch's ``powerSGD_hook`` with a ``PowerSGDState``, counted;
* ``quant2bit``: :func:`quant2bit_hook`, written here.

**The 2-bit code.** Each chunk of ``chunk_size`` elements gets one float32 scale ``s``, the
chunk's root mean square, and each element one of four levels ``{-1.5, -0.5, +0.5, +1.5} * s``
(code 0..3, nearest level, thresholds at -s, 0, +s, values beyond +-1.5 s clamped). Why this
code: for a Gaussian chunk the MSE-optimal 4-level quantiser (Lloyd-Max) has levels +-0.453 and
+-1.510 sigma (error 0.1175 sigma^2); the uniform grid at +-0.5 and +-1.5 RMS comes within about
1 % of it (0.117 measured at chunk 1024), needs no search, and extends 1-bit Adam's "sign times RMS" code (Tang et al. 2021, DeepSpeed) by one
magnitude bit. Clamped tails and rounding are not lost: error feedback keeps them (below).
The scale costs 32 bits per chunk, 0.03 bit per element at the default 1024.

**Error feedback, two levels** (the scheme of DeepSpeed's compressed all-reduce, 1-bit Adam):
each rank adds its residual to the bucket, quantises, keeps ``residual = input - decoded``.
The bucket is cut into one part per rank; an all-to-all sends part j of every rank's codes to
rank j ("server" of part j), which decodes the world's versions, averages them, adds its own
server residual, quantises again, keeps the new server residual, and an all-gather hands every
rank every part's codes. Every rank decodes the same bytes, so every rank ends with the same
gradients. Over T steps, sum of results = T x mean gradient - (mean worker residual + server
residual): nothing is lost, only delayed. Non-finite residual entries are dropped so that one
overflowing step (AMP) does not poison the following ones.

**Codes on the wire.** 2-bit codes are packed 4 per byte with vectorised shifts
(:func:`pack_2bit`, CPU and CUDA alike); each part travels as one uint8 message, its packed
codes followed by its chunks' scales as raw float32 bytes, so that each phase is one
collective. Parts are zero-padded to a multiple of 4 elements (at most 4 x world - 1 elements
per bucket, counted in ``padded_elements``).

**Skipped parameters.** DDP buckets mix parameters; the hook reads ``bucket.parameters()``
(whose gradients lie back to back in ``bucket.buffer()``), maps them to their qualified names
and module classes, and turns those matching the skip list (case-insensitive substring of the
name or of the class, so an ``nn.LayerNorm`` inside an ``nn.Sequential`` matches ``norm``;
default ``layer_norm``, ``ln_``, ``norm``) into runs of the flat buffer. Those runs
are gathered into one vector and all-reduced plainly (divide by the world size, then sum, as
DDP's default does), started before the compressed exchange so both overlap; the rest is
compressed. Residuals are kept per DDP bucket index and dropped when the bucket's layout
changes (DDP rebuilds its buckets after the first iteration).

**Collectives.** gloo (CPU) supports ``all_to_all_single`` in the PyTorch this project pins
(checked on 2 and 3 ranks), so CPU and NCCL run the same two collectives: ``all_to_all_single``
then ``all_gather_into_tensor`` of uint8 messages. On CPU the whole bucket's work runs on one
ordered background thread per state (as :mod:`hpcbench.parallel.hooks` does), so the hook
returns a future at once and DDP keeps computing the next buckets; on CUDA it is issued
inline (``Work.wait()`` only makes the stream wait).

**Counting bytes.** :class:`WireStats` counts the bytes each rank *sends*, per collective:
an all-to-all sends the N-1 messages meant for the others; an all-gather makes each rank's
message reach N-1 ranks (N-1 sends per rank, whatever the algorithm); an all-reduce of S
bytes sends 2 (N-1)/N S per rank, the bandwidth-optimal (ring) figure that NCCL and gloo reach
for large buffers. ``fp32_bytes`` is what a ring all-reduce of the same elements in float32
would send. For the 2-bit exchange of m elements in N parts of P both phases count:
2 (N-1) x (P/4 + 4 x chunks per part) bytes against 2 (N-1)/N x 4 m, so ``wire_ratio`` =
1/16 + 1/chunk_size + padding (0.0635 measured at the defaults), the same reduction a 2-bit
ring all-reduce would give; a bucket smaller than N x chunk_size has one scale per part,
1/16 + N/m. The fp16 / bf16 hooks come out at exactly 1/2.

**Hierarchical composition.** Given a :class:`~hpcbench.parallel.hooks.HierarchicalState`,
the compressed part is summed plainly inside the node (reduce-scatter; on CPU an all-reduce,
as in hooks), this rank's shard goes through the 2-bit exchange among its peers of equal local
rank on the other nodes, and the node gathers the shards; skipped parameters take
:func:`~hpcbench.parallel.hooks.hierarchical_allreduce_`. Only inter-node bytes enter the
ratio; intra-node bytes are counted apart.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

from hpcbench.core.errors import ConfigError
from hpcbench.core.metrics import allreduce_bytes_sent
from hpcbench.core.registry import Registry
from hpcbench.parallel.hooks import (HierarchicalState, OrderedExecutor, all_gather_async, hierarchical_allreduce_,
                                     padded_length, reduce_scatter_async)

LEVELS = (-1.5, -0.5, 0.5, 1.5)
"""The four 2-bit levels in units of the chunk's RMS; code k decodes to (k - 1.5) x scale."""

DEFAULT_SKIP = ("layer_norm", "ln_", "norm")
"""Parameter-name fragments whose gradients travel uncompressed (the guide's layer-norm exception)."""

#: The 2-bit code's settings as the guide's tuning case used them (T-case, claim C8: "gradient compression to
#: 2 bits in 4 MB buckets, leaving layer_norm parameters uncompressed"): bits per element on the wire, the
#: code of one of the four :data:`LEVELS` ...
GUIDE_CODE_BITS = 2
#: ... and the DDP bucket the codes travel in, 4 MiB (the default of :attr:`Quant2BitConfig.bucket_cap_mb`).
GUIDE_BUCKET_BYTES = 4 << 20


def _dist():
    import torch.distributed as dist

    return dist


def _pad_last(t: Any, length: int) -> Any:
    """``t`` zero-padded along its last dimension to ``length`` (``t`` itself when already that long)."""
    import torch.nn.functional as F

    extra = length - t.shape[-1]
    return F.pad(t, (0, extra)) if extra else t


# -- the pure core: tensors in, tensors out --------------------------------------------------

def pack_2bit(codes: Any) -> Any:
    """Pack 2-bit codes 4 per byte along the last dimension.

    Args:
        codes: uint8 tensor ``[..., n]`` of values 0..3 (any n; the tail is zero-padded).

    Returns:
        uint8 tensor ``[..., ceil(n / 4)]``; element 4i+k sits in bits 2k..2k+1 of byte i.
    """
    n = codes.shape[-1]
    nbytes = -(-n // 4)
    c = _pad_last(codes, 4 * nbytes).reshape(*codes.shape[:-1], nbytes, 4)
    return c[..., 0] | (c[..., 1] << 2) | (c[..., 2] << 4) | (c[..., 3] << 6)


def unpack_2bit(packed: Any, n: int) -> Any:
    """Inverse of :func:`pack_2bit`: ``[..., ceil(n / 4)]`` bytes -> ``[..., n]`` codes 0..3."""
    import torch

    if packed.shape[-1] != -(-n // 4):
        raise ConfigError(f"{packed.shape[-1]} bytes cannot hold exactly {n} 2-bit codes", field="n")
    # arange, not torch.tensor([...]): no host-to-device copy, so no stream sync inside a CUDA hook
    shifts = torch.arange(0, 8, 2, dtype=torch.uint8, device=packed.device)
    codes = (packed.unsqueeze(-1) >> shifts) & 3
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * 4)[..., :n]


def _chunked(x: Any, chunk_size: int) -> tuple[Any, int]:
    """``x [..., n]`` zero-padded and viewed as ``[..., chunks, chunk_size]``; also the chunk count."""
    n = x.shape[-1]
    chunks = max(1, -(-n // chunk_size))
    return _pad_last(x, chunks * chunk_size).reshape(*x.shape[:-1], chunks, chunk_size), chunks


def quantize_2bit(x: Any, chunk_size: int) -> tuple[Any, Any]:
    """Quantise ``x`` to 2-bit codes with one RMS scale per chunk of its last dimension.

    Args:
        x: float tensor ``[..., n]`` (rows are chunked independently; the last chunk of a row
            may be shorter).
        chunk_size: elements per scale.

    Returns:
        ``(codes, scales)``: uint8 ``[..., n]`` in 0..3 and float32 ``[..., ceil(n / chunk_size)]``.
        Code k stands for ``(k - 1.5) * scale`` (see :data:`LEVELS`); an all-zero chunk has scale 0.
    """
    import torch

    n = x.shape[-1]
    xc, chunks = _chunked(x.float(), chunk_size)
    counts = torch.full((chunks,), float(chunk_size), dtype=torch.float32, device=x.device)
    counts[-1] = n - (chunks - 1) * chunk_size if n else 1
    scales = (xc.square().sum(-1) / counts).sqrt_()
    inv = torch.where(scales > 0, scales.reciprocal(), torch.zeros_like(scales))
    # nearest of the levels -1.5..1.5: thresholds at -1, 0, 1 in units of the scale
    t = torch.nan_to_num_(xc * inv.unsqueeze(-1), nan=0.0).add_(2.0).floor_().clamp_(0.0, 3.0)
    codes = t.to(torch.uint8).reshape(*x.shape[:-1], chunks * chunk_size)[..., :n]
    return codes, scales


def dequantize_2bit(codes: Any, scales: Any, chunk_size: int) -> Any:
    """Decode :func:`quantize_2bit`'s output to float32 ``[..., n]``."""
    n = codes.shape[-1]
    cc, _ = _chunked(codes, chunk_size)
    values = cc.float().sub_(1.5).mul_(scales.unsqueeze(-1))
    return values.reshape(*codes.shape[:-1], -1)[..., :n]


def quantize_with_feedback(x: Any, residual: Any | None, chunk_size: int) -> tuple[Any, Any, Any]:
    """One error-feedback step: quantise ``x + residual`` and keep what the codes miss.

    Args:
        x: float32 ``[..., n]``.
        residual: float32 like ``x``, or None (no error feedback: no residual is kept).
        chunk_size: elements per scale.

    Returns:
        ``(codes, scales, new_residual)`` with ``new_residual = (x + residual) - decoded`` in
        float32 (None without feedback); non-finite entries of it are set to 0.
    """
    import torch

    y = x if residual is None else x + residual
    codes, scales = quantize_2bit(y, chunk_size)
    if residual is None:
        return codes, scales, None
    new = y - dequantize_2bit(codes, scales, chunk_size)
    return codes, scales, torch.nan_to_num_(new, nan=0.0, posinf=0.0, neginf=0.0)


def encode_message(codes: Any, scales: Any) -> Any:
    """One uint8 message per row: the packed codes, then the scales' float32 bytes.

    Args:
        codes: uint8 ``[rows, n]`` with n a multiple of 4.
        scales: float32 ``[rows, chunks]``.

    Returns:
        uint8 ``[rows, n / 4 + 4 * chunks]`` (contiguous, ready for a collective).
    """
    import torch

    rows = codes.shape[0]
    raw = scales.contiguous().view(torch.uint8).reshape(rows, -1)
    return torch.cat([pack_2bit(codes), raw], dim=1)


def decode_message(message: Any, n: int, chunk_size: int) -> Any:
    """Decode :func:`encode_message`'s rows back to float32 ``[rows, n]``."""
    import torch

    nbytes = -(-n // 4)
    codes = unpack_2bit(message[:, :nbytes], n)
    # a copy: the scales' bytes start at any offset, and a float32 view needs 4-byte alignment
    scales = message[:, nbytes:].clone(memory_format=torch.contiguous_format).view(torch.float32)
    return dequantize_2bit(codes, scales, chunk_size)


def message_bytes(n: int, chunk_size: int) -> int:
    """Bytes of one part's message: ``ceil(n / 4)`` code bytes plus 4 per chunk."""
    return -(-n // 4) + 4 * max(1, -(-n // chunk_size))


@dataclass
class ExchangeResult:
    """What :func:`compressed_allreduce` returns."""

    average: Any
    """float32 ``[m]``: the decoded average, identical on every rank of the group"""
    residual: Any | None
    """this rank's new worker residual ``[m]`` (None without error feedback)"""
    server_residual: Any | None
    """this rank's new server residual for the part it owns ``[part]`` (None without)"""
    bytes_sent: int
    """bytes this rank sent in both phases"""
    padded_elements: int
    part: int
    """elements per part (each rank owns part ``rank``)"""


def compressed_allreduce(flat: Any, *, group: Any = None, chunk_size: int = 1024, divisor: float | None = None,
                         residual: Any | None = None, server_residual: Any | None = None,
                         error_feedback: bool = True) -> ExchangeResult:
    """Average ``flat`` over ``group`` sending 2-bit codes: all-to-all, server re-quantisation, all-gather.

    Args:
        flat: 1-D float tensor of ``m`` elements (this rank's contribution; not modified).
        group: the process group (None: the world).
        chunk_size: elements per scale.
        divisor: the sum is divided by this (default: the group size).
        residual: this rank's worker residual ``[m]`` from the previous call (None: zeros).
        server_residual: this rank's server residual ``[part]`` from the previous call (None: zeros).
        error_feedback: keep and use both residuals.

    Returns:
        :class:`ExchangeResult`. With a group of one rank nothing is sent and ``average`` is
        ``flat / divisor`` exactly.

    Reference: DeepSpeed's compressed all-reduce (Tang et al., "1-bit Adam", ICML 2021, sec. 4).
    """
    import torch

    dist = _dist()
    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    divisor = float(world if divisor is None else divisor)
    m = flat.numel()
    x = flat.reshape(-1).float()
    if world == 1 or m == 0:
        return ExchangeResult(x / divisor, None, None, 0, 0, m)
    part = padded_length(-(-m // world), 4)
    total = world * part
    work = _pad_last(x, total).reshape(world, part)
    if error_feedback:
        old = torch.zeros(total, dtype=torch.float32, device=x.device)
        if residual is not None:
            old[:m] = residual
        codes, scales, new_res = quantize_with_feedback(work, old.view(world, part), chunk_size)
        new_res = new_res.reshape(-1)[:m].clone()  # padding is no gradient: its error is not kept
    else:
        codes, scales = quantize_2bit(work, chunk_size)
        new_res = None
    msg = encode_message(codes, scales)
    received = torch.empty_like(msg)
    dist.all_to_all_single(received, msg, group=group, async_op=True).wait()
    mine = decode_message(received, part, chunk_size).sum(0).div_(divisor)
    valid = min(max(m - me * part, 0), part)
    mine[valid:] = 0.0  # the padding's decoded values are noise, not gradient
    if error_feedback:
        old_server = server_residual if server_residual is not None else torch.zeros_like(mine)
        s_codes, s_scales, new_server = quantize_with_feedback(mine.unsqueeze(0), old_server.unsqueeze(0), chunk_size)
        new_server = new_server.reshape(-1)
        new_server[valid:] = 0.0
    else:
        s_codes, s_scales = quantize_2bit(mine.unsqueeze(0), chunk_size)
        new_server = None
    s_msg = encode_message(s_codes, s_scales)
    gathered = torch.empty((world, s_msg.shape[1]), dtype=torch.uint8, device=x.device)
    all_gather_async(gathered, s_msg, group).wait()
    average = decode_message(gathered, part, chunk_size).reshape(-1)[:m]
    sent = (world - 1) * (msg.shape[1] + s_msg.shape[1])
    return ExchangeResult(average, new_res, new_server, sent, total - m, part)


# -- statistics ---------------------------------------------------------------------------------

@dataclass
class WireStats:
    """Bytes one rank sent for gradients, counted as the module docstring says.

    ``wire_ratio`` compares the compressed part with a float32 ring all-reduce of the same
    elements; ``total_ratio`` compares everything with a float32 all-reduce of every gradient.
    """

    buckets: int = 0
    """hook calls (one per DDP bucket per step)"""
    compressed_elements: int = 0
    plain_elements: int = 0
    """elements that travelled uncompressed (skipped parameters, PowerSGD's vectors, ``none``)"""
    compressed_bytes: float = 0.0
    """bytes sent for the compressed part (codes and scales, both phases; fp16 values; P and Q)"""
    plain_bytes: float = 0.0
    """bytes sent for the plain part"""
    fp32_bytes: float = 0.0
    """bytes a float32 ring all-reduce of the compressed elements would have sent"""
    fp32_plain_bytes: float = 0.0
    """the same for the plain elements"""
    intra_node_bytes: float = 0.0
    """hierarchical composition only: bytes sent inside the node (not in the ratios)"""
    padded_elements: int = 0
    max_bucket_bytes: int = 0
    """the largest bucket DDP handed over (to check the bucket size the model runs with)"""

    @property
    def wire_ratio(self) -> float:
        """compressed_bytes / fp32_bytes (NaN when nothing was compressed)."""
        return self.compressed_bytes / self.fp32_bytes if self.fp32_bytes else math.nan

    @property
    def total_ratio(self) -> float:
        """All bytes sent / bytes of a float32 all-reduce of every gradient (NaN before any)."""
        base = self.fp32_bytes + self.fp32_plain_bytes
        return (self.compressed_bytes + self.plain_bytes) / base if base else math.nan

    def note_bucket(self, buffer: Any) -> None:
        """Count one hook call and remember the largest bucket."""
        self.buckets += 1
        self.max_bucket_bytes = max(self.max_bucket_bytes, buffer.numel() * buffer.element_size())

    def add_plain(self, elements: int, element_size: int, world: int) -> None:
        """Count a plain all-reduce of ``elements`` values of ``element_size`` bytes."""
        self.plain_elements += elements
        self.plain_bytes += allreduce_bytes_sent(elements * element_size, world)
        self.fp32_plain_bytes += allreduce_bytes_sent(elements * 4, world)

    def as_dict(self) -> dict[str, float]:
        """Every counter and both ratios (for records)."""
        return {**asdict(self), "wire_ratio": self.wire_ratio, "total_ratio": self.total_ratio}

    def reset(self) -> None:
        """Zero every counter (e.g. after warm-up steps)."""
        for f in fields(self):
            setattr(self, f.name, f.default)


# -- the 2-bit hook ------------------------------------------------------------------------------

@dataclass
class Quant2BitConfig:
    """Options of ``quant2bit``."""

    chunk_size: int = 1024
    """elements per float32 scale: 1024 costs 0.03 bit per element; smaller chunks follow the
    gradient's scale more closely. At least 16 (below, the scale outweighs the codes)."""
    skip: tuple[str, ...] = DEFAULT_SKIP
    """parameter-name fragments (case-insensitive) whose gradients are all-reduced plainly"""
    error_feedback: bool = True
    """keep worker and server residuals (off only to show what they are worth)"""
    bucket_cap_mb: float = GUIDE_BUCKET_BYTES / (1 << 20)
    """the DDP bucket size the guide used (4 MiB, :data:`GUIDE_BUCKET_BYTES`); DDP takes it at construction, see
    :attr:`CompressionSpec.bucket_cap_mb`"""

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 16:
            raise ConfigError(f"{self.chunk_size!r} is out of range; allowed: an integer >= 16",
                              field="chunk_size", config="quant2bit")
        if isinstance(self.skip, str):
            raise ConfigError(f"{self.skip!r} is one string; give a list of name fragments", field="skip",
                              config="quant2bit")
        self.skip = tuple(self.skip)
        if not all(isinstance(s, str) and s for s in self.skip):
            raise ConfigError(f"{list(self.skip)!r} must hold non-empty strings", field="skip", config="quant2bit")
        if not isinstance(self.error_feedback, bool):
            raise ConfigError(f"{self.error_feedback!r} is not a bool", field="error_feedback", config="quant2bit")
        if isinstance(self.bucket_cap_mb, bool) or not (isinstance(self.bucket_cap_mb, (int, float))
                                                         and self.bucket_cap_mb > 0):
            raise ConfigError(f"{self.bucket_cap_mb!r} is out of range; allowed: > 0", field="bucket_cap_mb",
                              config="quant2bit")


def is_skipped(name: str, skip: tuple[str, ...], module_class: str = "") -> bool:
    """Whether a parameter travels uncompressed: a fragment of ``skip`` occurs (in any case) in its
    qualified ``name`` or in its module's class name.

    The class name catches layer norms that sit in an ``nn.Sequential`` (named ``"1.weight"``):
    with the default list, ``LayerNorm``, ``RMSNorm`` and ``GroupNorm`` match ``norm``.
    """
    targets = (name.lower(), module_class.lower())
    return any(s.lower() in t for s in skip for t in targets)


def split_runs(numels: list[int], skipped: list[bool]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Cut a flat bucket into ``(start, stop)`` runs to compress and runs to send plainly.

    Args:
        numels: the bucket's gradients' sizes, in bucket order (they lie back to back).
        skipped: for each, whether it belongs to a skipped parameter.

    Returns:
        ``(compressed_runs, plain_runs)``, neighbouring gradients of the same kind merged.
    """
    runs: tuple[list, list] = ([], [])
    start = 0
    for numel, skip in zip(numels, skipped):
        stop = start + numel
        out = runs[1] if skip else runs[0]
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], stop)
        elif numel:
            out.append((start, stop))
        start = stop
    return runs


def _gather_runs(buf: Any, runs: list[tuple[int, int]]) -> Any:
    """The elements of ``runs`` as one vector (a view when one run covers them)."""
    import torch

    if len(runs) == 1:
        return buf[runs[0][0]:runs[0][1]]
    if not runs:
        return buf[:0]
    return torch.cat([buf[a:b] for a, b in runs])


def _scatter_runs(buf: Any, runs: list[tuple[int, int]], values: Any) -> None:
    """Write ``values`` (laid out as :func:`_gather_runs` made them) back into ``buf``'s runs."""
    at = 0
    for a, b in runs:
        target = buf[a:b]
        if target.data_ptr() != values[at:at + b - a].data_ptr() or target.dtype != values.dtype:
            target.copy_(values[at:at + b - a])
        at += b - a


@dataclass
class Quant2BitState:
    """State of :func:`quant2bit_hook`: options, parameter names, residuals and statistics.

    Build it with :func:`apply_compression` (or :meth:`for_model`). Residuals are keyed by
    DDP bucket index (``("hier", index)`` in the hierarchical composition). On CPU the
    statistics are updated on the background thread; read them after ``backward()`` returns.
    """

    config: Quant2BitConfig
    param_names: dict[int, tuple[str, str]] = field(repr=False)
    """``id(parameter) -> (qualified name, class name of its module)`` of the DDP model's parameters"""
    process_group: Any = None
    hierarchical: HierarchicalState | None = None
    stats: WireStats = field(default_factory=WireStats)
    residuals: dict[Any, Any] = field(default_factory=dict, repr=False)
    server_residuals: dict[Any, Any] = field(default_factory=dict, repr=False)
    layouts: dict[int, tuple] = field(default_factory=dict, repr=False)
    """bucket index -> (parameter ids, compressed runs, plain runs)"""
    _executor: OrderedExecutor | None = field(default=None, repr=False)

    @classmethod
    def for_model(cls, ddp_model: Any, config: Quant2BitConfig | None = None, *, process_group: Any = None,
                  hierarchical: HierarchicalState | None = None) -> "Quant2BitState":
        """A state for ``ddp_model``: parameter names and module classes from its ``module``."""
        module = getattr(ddp_model, "module", ddp_model)
        names = {}
        for mod_name, mod in module.named_modules():
            for p_name, p in mod.named_parameters(recurse=False):
                names[id(p)] = (f"{mod_name}.{p_name}" if mod_name else p_name, type(mod).__name__)
        if hierarchical is not None and process_group is not None:
            raise ConfigError("the hierarchical composition reduces over the world; leave process_group None",
                              field="process_group", config="quant2bit")
        return cls(config=config or Quant2BitConfig(), param_names=names, process_group=process_group,
                   hierarchical=hierarchical)

    def layout(self, bucket: Any) -> tuple[list, list]:
        """The bucket's compressed and plain runs (cached per bucket index and parameter list)."""
        params = bucket.parameters()
        ids = tuple(id(p) for p in params)
        cached = self.layouts.get(bucket.index())
        if cached is None or cached[0] != ids:
            labels = [self.param_names.get(id(p), ("", "")) for p in params]
            skipped = [is_skipped(name, self.config.skip, kind) for name, kind in labels]
            comp, plain = split_runs([p.numel() for p in params], skipped)
            cached = (ids, comp, plain)
            self.layouts[bucket.index()] = cached
        return cached[1], cached[2]

    def _residual(self, store: dict, key: Any, length: int) -> Any | None:
        old = store.get(key)
        return old if old is not None and old.numel() == length else None

    def exchange(self, flat: Any, key: Any, group: Any, divisor: float) -> Any:
        """The 2-bit average of ``flat`` over ``group`` with this state's residuals; updates statistics."""
        cfg = self.config
        m = flat.numel()
        world = _dist().get_world_size(group)
        res = compressed_allreduce(
            flat, group=group, chunk_size=cfg.chunk_size, divisor=divisor,
            residual=self._residual(self.residuals, key, m),
            server_residual=self._residual(self.server_residuals, key, padded_length(-(-m // world), 4)),
            error_feedback=cfg.error_feedback)
        if res.residual is not None:
            self.residuals[key] = res.residual
        if res.server_residual is not None:
            self.server_residuals[key] = res.server_residual
        self.stats.compressed_elements += m
        self.stats.compressed_bytes += res.bytes_sent
        self.stats.fp32_bytes += allreduce_bytes_sent(4 * m, world)
        self.stats.padded_elements += res.padded_elements
        return res.average

    def reduce_bucket(self, buf: Any, comp_runs: list, plain_runs: list, index: int) -> Any:
        """Average the flat bucket ``buf`` in place: plain runs all-reduced, the rest 2-bit. Returns ``buf``."""
        dist = _dist()
        hier = self.hierarchical
        world = hier.topology.world_size if hier else dist.get_world_size(self.process_group)
        plain = _gather_runs(buf, plain_runs)
        work = None
        if plain.numel():
            plain.div_(world)  # DDP's order: divide, then sum
            if hier is None:
                self.stats.add_plain(plain.numel(), plain.element_size(), world)
                work = dist.all_reduce(plain, group=self.process_group, async_op=True)
            else:
                self._count_hierarchical_plain(plain)
                hierarchical_allreduce_(plain, hier)
        comp = _gather_runs(buf, comp_runs)
        if comp.numel():
            if hier is None:
                avg = self.exchange(comp, index, self.process_group, world)
            else:
                avg = self._hierarchical(comp, index)
            comp.copy_(avg)
            _scatter_runs(buf, comp_runs, comp)
        if work is not None:
            work.wait()
        if plain.numel():
            _scatter_runs(buf, plain_runs, plain)
        return buf

    # -- hierarchical composition ---------------------------------------------------------
    def _count_hierarchical_plain(self, plain: Any) -> None:
        topo = self.hierarchical.topology
        shard = padded_length(plain.numel(), topo.ranks_per_node) // topo.ranks_per_node
        self.stats.plain_elements += plain.numel()
        self.stats.plain_bytes += allreduce_bytes_sent(shard * plain.element_size(), topo.nodes)
        self.stats.fp32_plain_bytes += allreduce_bytes_sent(shard * 4, topo.nodes)
        self.stats.intra_node_bytes += self._intra_bytes(shard * topo.ranks_per_node * plain.element_size(),
                                                         plain.is_cuda)

    def _intra_bytes(self, nbytes: int, cuda: bool) -> float:
        """Bytes sent inside the node by the two intra-node stages (reduce-scatter + all-gather,
        or the two all-reduces of the CPU path)."""
        hier = self.hierarchical
        per = hier.topology.ranks_per_node
        if per == 1:
            return 0.0
        via_allreduce = hier.intra_via_allreduce if hier.intra_via_allreduce is not None else not cuda
        one_way = (per - 1) / per * nbytes
        return 2 * allreduce_bytes_sent(nbytes, per) if via_allreduce else 2 * one_way

    def _hierarchical(self, comp: Any, index: int) -> Any:
        """Sum in the node, 2-bit exchange of this rank's shard among nodes, gather in the node."""
        import torch

        dist = _dist()
        hier = self.hierarchical
        topo = hier.topology
        per = topo.ranks_per_node
        m = comp.numel()
        total = padded_length(m, per)
        size = total // per
        work = _pad_last(comp.float(), total).clone()
        self.stats.padded_elements += total - m
        self.stats.intra_node_bytes += self._intra_bytes(total * 4, comp.is_cuda)
        via_allreduce = hier.intra_via_allreduce if hier.intra_via_allreduce is not None else not comp.is_cuda
        lo, hi = topo.local_rank * size, (topo.local_rank + 1) * size
        if per > 1 and via_allreduce:
            dist.all_reduce(work, group=hier.intra_group, async_op=True).wait()
            shard = work[lo:hi]
        elif per > 1:
            shard = torch.empty(size, dtype=work.dtype, device=work.device)
            reduce_scatter_async(shard, work, hier.intra_group).wait()
        else:
            shard = work
        avg = self.exchange(shard, ("hier", index), hier.inter_group, topo.world_size)
        if per == 1:
            return avg
        if via_allreduce:
            work.zero_()
            work[lo:hi] = avg
            dist.all_reduce(work, group=hier.intra_group, async_op=True).wait()
        else:
            all_gather_async(work, avg.contiguous(), hier.intra_group).wait()
        return work[:m]

    def run(self, buf: Any, comp_runs: list, plain_runs: list, index: int) -> Any:
        """Reduce ``buf``; a future of it (CPU: on this state's ordered background thread)."""
        import torch

        self.stats.note_bucket(buf)
        if buf.is_cuda:
            self.reduce_bucket(buf, comp_runs, plain_runs, index)
            fut = torch.futures.Future(devices=[buf.device])
            fut.set_result(buf)
            return fut
        if self._executor is None:
            self._executor = OrderedExecutor("hpcbench-quant2bit")
        return self._executor.submit(lambda b: self.reduce_bucket(b, comp_runs, plain_runs, index), buf)


def quant2bit_hook(state: Quant2BitState, bucket):  # bucket: dist.GradBucket (DDP checks the annotation)
    """DDP comm hook: skipped parameters all-reduced plainly, the rest averaged with 2-bit codes.

    See the module docstring for the code, the two-phase exchange and the byte count.
    """
    comp, plain = state.layout(bucket)
    return state.run(bucket.buffer(), comp, plain, bucket.index())


# -- PyTorch's hooks, counted ---------------------------------------------------------------------

@dataclass
class CountedState:
    """State of a PyTorch hook wrapped by :func:`counted_hook`: the hook's own state and the statistics."""

    inner: Any
    """what the PyTorch hook takes as state (a process group, or a ``PowerSGDState``)"""
    process_group: Any = None
    stats: WireStats = field(default_factory=WireStats)


def _count_allreduce(state: CountedState, bucket: Any, wire_element_size: int | None) -> None:
    """Count one all-reduce of the whole bucket: plain (None) or cast to ``wire_element_size`` bytes."""
    buf = bucket.buffer()
    world = _dist().get_world_size(state.process_group)
    if wire_element_size is None:
        state.stats.add_plain(buf.numel(), buf.element_size(), world)
        return
    state.stats.compressed_elements += buf.numel()
    state.stats.compressed_bytes += allreduce_bytes_sent(buf.numel() * wire_element_size, world)
    state.stats.fp32_bytes += allreduce_bytes_sent(buf.numel() * 4, world)


def _count_powersgd(state: CountedState, bucket: Any) -> None:
    """Count what ``powerSGD_hook`` will all-reduce for this bucket, with PowerSGD's own rule.

    Before ``start_powerSGD_iter`` it all-reduces the bucket plainly; after, each gradient of
    n x m (matrix view) with rank r = min(n, m, rank) is compressed when
    (n + m) r x min_compression_rate < n m (P and Q, n r + m r values, are all-reduced), the
    others are all-reduced as they are (documented in ``PowerSGDState``).
    """
    ps = state.inner
    buf = bucket.buffer()
    world = _dist().get_world_size(state.process_group)
    size = buf.element_size()
    if ps.iter < ps.start_powerSGD_iter:
        state.stats.add_plain(buf.numel(), size, world)
        return
    for grad in bucket.gradients():
        rows = grad.shape[0] if grad.dim() else 1
        cols = grad.numel() // max(rows, 1)
        r = min(rows, cols, ps.matrix_approximation_rank)
        if (rows + cols) * r * ps.min_compression_rate < rows * cols:
            state.stats.compressed_elements += grad.numel()
            state.stats.compressed_bytes += allreduce_bytes_sent((rows + cols) * r * size, world)
            state.stats.fp32_bytes += allreduce_bytes_sent(grad.numel() * 4, world)
        else:
            state.stats.add_plain(grad.numel(), size, world)


def counted_hook(hook: Callable, count: Callable[[CountedState, Any], None]) -> Callable:
    """Wrap PyTorch's ``hook(inner_state, bucket)`` so that ``count(state, bucket)`` runs first.

    The wrapped hook takes a :class:`CountedState`; the PyTorch hook runs unchanged on
    ``state.inner``.
    """
    def counted(state: CountedState, bucket):
        state.stats.note_bucket(bucket.buffer())
        count(state, bucket)
        return hook(state.inner, bucket)

    counted.__qualname__ = f"counted_{getattr(hook, '__name__', 'hook')}"
    return counted


# -- the registry --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CompressionSpec:
    """One way of sending gradients, as :data:`COMPRESSIONS` holds it."""

    name: str
    description: str
    wire_dtype: str
    """what the compressed part travels as"""
    wire_bits: float | None
    """bits per compressed element on the wire, scales aside (None: depends on shapes, PowerSGD)"""
    build: Callable[[Any, Any, HierarchicalState | None, dict], tuple[Any, Callable]]
    """(ddp_model, process_group, hierarchical state or None, options) -> (state, hook)"""
    options: tuple[str, ...] = ()
    """the option names ``build`` accepts"""
    bucket_cap_mb: float | None = None
    """the DDP bucket size to construct the model with (None: DDP's default)"""


COMPRESSIONS: Registry[CompressionSpec] = Registry("gradient compression")


def _no_hierarchy(name: str, hierarchical: HierarchicalState | None) -> None:
    if hierarchical is not None:
        raise ConfigError(f"{name!r} has no hierarchical composition; only 'quant2bit' has",
                          field="hierarchical", config=name)


def _build_pytorch(name: str, hook_name: str, wire_size: int | None) -> Callable:
    def build(ddp_model: Any, group: Any, hierarchical: HierarchicalState | None, options: dict):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        _no_hierarchy(name, hierarchical)
        state = CountedState(inner=group, process_group=group)
        return state, counted_hook(getattr(default_hooks, hook_name),
                                   lambda s, b: _count_allreduce(s, b, wire_size))

    return build


POWERSGD_OPTIONS = ("matrix_approximation_rank", "start_powerSGD_iter", "min_compression_rate",
                    "use_error_feedback", "warm_start", "orthogonalization_epsilon", "random_seed")


def _build_powersgd(ddp_model: Any, group: Any, hierarchical: HierarchicalState | None, options: dict):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    _no_hierarchy("powersgd", hierarchical)
    # PyTorch's defaults except the start: 10 plain steps (not 1000) let DDP rebuild its
    # buckets first, which error feedback needs, without spending a short benchmark uncompressed
    kwargs = {"start_powerSGD_iter": 10, **options}
    try:
        inner = psgd.PowerSGDState(process_group=group, **kwargs)
    except ValueError as exc:  # PyTorch's own check (start_powerSGD_iter > 1 with error feedback)
        raise ConfigError(str(exc), field="start_powerSGD_iter", config="powersgd") from None
    return CountedState(inner=inner, process_group=group), counted_hook(psgd.powerSGD_hook, _count_powersgd)


def _build_quant2bit(ddp_model: Any, group: Any, hierarchical: HierarchicalState | None, options: dict):
    state = Quant2BitState.for_model(ddp_model, Quant2BitConfig(**options), process_group=group,
                                     hierarchical=hierarchical)
    return state, quant2bit_hook


COMPRESSIONS.register("none", CompressionSpec(
    "none", "float32 all-reduce (PyTorch's allreduce_hook: DDP's default sums), counted", "float32", 32,
    _build_pytorch("none", "allreduce_hook", None)))
COMPRESSIONS.register("fp16", CompressionSpec(
    "fp16", "PyTorch's fp16_compress_hook: cast to float16, all-reduce, cast back", "float16", 16,
    _build_pytorch("fp16", "fp16_compress_hook", 2)))
COMPRESSIONS.register("bf16", CompressionSpec(
    "bf16", "PyTorch's bf16_compress_hook: cast to bfloat16, all-reduce, cast back", "bfloat16", 16,
    _build_pytorch("bf16", "bf16_compress_hook", 2)))
COMPRESSIONS.register("powersgd", CompressionSpec(
    "powersgd", "PyTorch's powerSGD_hook: rank-r factors P, Q of each matrix all-reduced, vectors plain",
    "float32 low-rank factors", None, _build_powersgd, POWERSGD_OPTIONS))
COMPRESSIONS.register("quant2bit", CompressionSpec(
    "quant2bit", "2-bit codes + per-chunk RMS scales, worker and server error feedback, all-to-all + all-gather; "
    "layer-norm parameters all-reduced plainly", "2-bit codes + float32 scales", 2,
    _build_quant2bit, tuple(f.name for f in fields(Quant2BitConfig)), bucket_cap_mb=4.0))


def check_options(name: str, options: dict[str, Any]) -> CompressionSpec:
    """The spec of compression ``name`` after checking ``options`` against it; no collective runs.

    Raises:
        RegistryError: unknown name (the message lists the registered ones).
        ConfigError: an unknown option, naming it, or (``quant2bit``) an invalid value.
    """
    from hpcbench.core.registry import did_you_mean

    spec = COMPRESSIONS.get(name)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        hint = did_you_mean(unknown, spec.options)
        raise ConfigError(f"unknown option(s) {unknown}; valid: {list(spec.options)}" + (f"; {hint}" if hint else ""),
                          field=unknown[0], config=name)
    if name == "quant2bit":
        Quant2BitConfig(**options)
    return spec


def apply_compression(ddp_model: Any, name: str, *, process_group: Any = None,
                      hierarchical: HierarchicalState | None = None, **options: Any) -> Any:
    """Register compression ``name`` of :data:`COMPRESSIONS` as ``ddp_model``'s comm hook.

    Args:
        ddp_model: a ``DistributedDataParallel`` module with no comm hook yet (DDP takes one).
        name: ``none``, ``fp16``, ``bf16``, ``powersgd`` or ``quant2bit``.
        process_group: the group to reduce over (None: the world; must be DDP's own group).
        hierarchical: ``quant2bit`` only: compress only the inter-node exchange (module docstring).
        **options: the spec's options (``quant2bit``: :class:`Quant2BitConfig`'s fields;
            ``powersgd``: ``PowerSGDState``'s arguments in :data:`POWERSGD_OPTIONS`).

    Returns:
        The hook's state; its ``stats`` (:class:`WireStats`) count the bytes sent.

    Raises:
        RegistryError: unknown name (the message lists the registered ones).
        ConfigError: an unknown or invalid option, naming it.
    """
    spec = check_options(name, options)
    if process_group is None and hierarchical is None:
        # reduce over the group DDP itself was built with
        process_group = getattr(ddp_model, "process_group", None)
    state, hook = spec.build(ddp_model, process_group, hierarchical, options)
    ddp_model.register_comm_hook(state, hook)
    return state


def bucket_cap_mb_for(name: str, requested: float | None = None, **options: Any) -> float | None:
    """The DDP bucket size (MiB) to construct the model with for compression ``name``.

    DDP fixes its buckets at construction, before a hook can be registered, so the guide's
    "4 MB buckets" must reach ``DistributedDataParallel(bucket_cap_mb=...)``: ``requested``
    when given, else the ``bucket_cap_mb`` option (``quant2bit``), else the spec's default
    (4.0 for ``quant2bit``, None, i.e. DDP's 25 MiB, for the others).
    """
    if requested is not None:
        return requested
    return options.get("bucket_cap_mb", COMPRESSIONS.get(name).bucket_cap_mb)


__all__ = ["COMPRESSIONS", "CompressionSpec", "CountedState", "DEFAULT_SKIP", "ExchangeResult", "GUIDE_BUCKET_BYTES",
           "GUIDE_CODE_BITS", "LEVELS", "POWERSGD_OPTIONS", "Quant2BitConfig", "Quant2BitState", "WireStats",
           "allreduce_bytes_sent", "apply_compression", "bucket_cap_mb_for", "check_options", "compressed_allreduce",
           "counted_hook", "decode_message", "dequantize_2bit", "encode_message", "is_skipped", "message_bytes",
           "pack_2bit", "quant2bit_hook", "quantize_2bit", "quantize_with_feedback", "split_runs", "unpack_2bit"]
