"""The training step: a plain eager fp32 step against the experiments' tuned recipe, side by side.

Run: ``hpcbench bench train-step [--model M] [--batch B] [--arms plain,tuned,compiled] [--rounds 3]``

One model, one synthetic batch, on this machine's device (the first GPU, else the CPU), as three arms,
each with its own model and optimizer built once from the same seed:

* ``plain``: fp32, NCHW, eager, AdamW looping over its tensors one by one (``foreach=False``): a step
  nobody tuned;
* ``tuned``: the recipe of :mod:`hpcbench.models.step` on this device (what ``make gpu-check`` and the
  experiments run): on a GPU bf16 autocast, NHWC for the CNNs, SDPA attention and a fused AdamW; on a
  CPU fp32 with the ``foreach`` AdamW;
* ``compiled``: ``tuned`` under ``torch.compile``; its compilation (the first step) is printed apart
  and never timed.

Rounds interleave the arms (alternating their order), each arm timing ``--steps`` synchronised steps
per round, so that drift on a shared machine hits every arm alike. Printed per arm: the median step,
throughput, the ratio to ``plain``, the first step (compilation) and, on a GPU in the peak table, MFU
(FLOPs per step as :mod:`hpcbench.bench.gpu_check` counts them). Targets: ``tuned`` >= ``plain`` on
any device; on one H100/H200, the best arm >= 40 % MFU for GPT-2 124M (``--model gpt2_124M``) and
>= 6,000 images/s for ResNet-50 (``--model resnet50``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

from hpcbench.bench.gpu_check import STEP_FLOPS, TrainPlan, mfu
from hpcbench.bench.result import BenchResult, Ratio
from hpcbench.core.errors import ConfigError
from hpcbench.core.metrics import peak_dense_bf16_flops
from hpcbench.models import MODELS
from hpcbench.models.step import (StepRecipe, StepSettings, make_optimizer, prepare_model, step_settings,
                                  timed_first_step)

ARMS = ("plain", "tuned", "compiled")
#: What tests/test_bench.py runs: seconds on a CPU (the compiled arm's compilation alone takes ~20 s there).
TOY_ARGS = ["--model", "gpt2_tiny", "--batch", "2", "--seq-len", "16", "--steps", "2", "--warmup", "1",
            "--rounds", "2", "--arms", "plain,tuned"]
TUNED_TARGET = 1.0
#: On one H100/H200, the best arm's target per model: (metric, value).
GPU_TARGETS = {"gpt2_124M": ("mfu", 0.40), "resnet50": ("throughput", 6000.0)}


def arm_settings(arm: str, device_type: str, kind: str) -> StepSettings:
    """An arm's step settings: ``tuned`` is the recipe's, the others differ from it in what they name."""
    tuned = step_settings(StepRecipe(), device_type, kind)
    if arm == "plain":
        return replace(tuned, dtype="float32", channels_last=False, optimizer_options=(("foreach", False),),
                       compile=False)
    return replace(tuned, compile=arm == "compiled")


def _build(arm: str, spec: Any, device: Any, args: argparse.Namespace, sync: Any) -> dict[str, Any]:
    import torch

    settings = arm_settings(arm, device.type, spec.kind)
    torch.manual_seed(0)
    inner = spec.build().to(device)
    model = prepare_model(inner, settings)
    opt = make_optimizer(model.parameters(), settings)
    x, y = spec.synthetic_batch(args.batch, device=device, seed=0, image_size=args.image_size, seq_len=args.seq_len)
    model.train()

    def step() -> Any:
        loss = spec.loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    _, first_s = timed_first_step(step, sync)
    for _ in range(args.warmup - 1):
        step()
    return {"settings": settings, "step": step, "first_s": first_s, "inner": inner}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench train-step --help``)."""
    ap.add_argument("--model", default=None, help="a registered model (default: gpt2_124M on a GPU, gpt2_small "
                                                  "on a CPU)")
    ap.add_argument("--batch", type=int, default=None, help="micro-batch (default: 16 on a GPU, 8 on a CPU)")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: 1024 GPU, 128 CPU)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {list(ARMS)}; plain is the "
                                                          "reference of the ratios")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per arm, the first timed apart")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per arm and round")
    ap.add_argument("--rounds", type=int, default=3)


def run(args: argparse.Namespace) -> BenchResult:
    """The arms' steps interleaved: one row per arm; each arm's speed against plain as a ratio (tuned judged
    against :data:`TUNED_TARGET`) and, on an H100/H200, the best arm against :data:`GPU_TARGETS`."""
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(arms) - set(ARMS):
        raise ConfigError(f"unknown {sorted(unknown)}; allowed: {list(ARMS)}", field="--arms")
    if "plain" not in arms:
        raise ConfigError("needs plain, the reference of the ratios", field="--arms")
    for name in ("warmup", "steps", "rounds"):
        if getattr(args, name) < 1:
            raise ConfigError(f"{getattr(args, name)}; allowed: >= 1", field=f"--{name}")

    import torch

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    args.model = args.model or ("gpt2_124M" if cuda else "gpt2_small")
    args.batch = args.batch or (16 if cuda else 8)
    args.seq_len = args.seq_len or (1024 if cuda else 128)
    spec = MODELS.get(args.model)  # a typo is answered with the registered names
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    peak = peak_dense_bf16_flops(torch.cuda.get_device_name(device)) if cuda else None
    plan = TrainPlan(args.model, batch_size=args.batch, image_size=args.image_size, seq_len=args.seq_len)
    per_step = args.batch * spec.items_per_sample(seq_len=args.seq_len)

    built = {}
    for arm in arms:
        built[arm] = _build(arm, spec, device, args, sync)
        print(f"[train_step] {arm}: first step {built[arm]['first_s']:.2f} s", file=sys.stderr, flush=True)
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for rnd in range(args.rounds):
        for arm in (arms if rnd % 2 == 0 else arms[::-1]):
            step = built[arm]["step"]
            for _ in range(args.steps):
                sync()
                t0 = time.perf_counter()
                step()
                sync()
                times[arm].append(time.perf_counter() - t0)

    flops_fn = STEP_FLOPS.get(args.model)
    flops = flops_fn(built[arms[0]]["inner"], plan) if flops_fn else None
    base = statistics.median(times["plain"])
    rows = []
    for arm in arms:
        med = statistics.median(times[arm])
        s = built[arm]["settings"].labels()
        rows.append({"arm": arm, "precision": s["dtype"], "NHWC": s["channels_last"],
                     "optimizer": f"{s['optimizer']} {s['optimizer_options']}".strip(), "step_ms": med * 1e3,
                     f"throughput_{spec.throughput_unit}": per_step / med, "vs_plain": base / med,
                     "mfu": mfu(flops, med, peak) if flops else None, "first_step_s": built[arm]["first_s"],
                     "settings": s, "steps_s": times[arm]})
    ratios = [Ratio(f"{r['arm']} step speed, x plain", "plain step time", f"{r['arm']} step time", r["vs_plain"],
                    TUNED_TARGET if r["arm"] == "tuned" else None) for r in rows if r["arm"] != "plain"]
    if cuda and args.model in GPU_TARGETS:
        metric, target = GPU_TARGETS[args.model]
        throughput = f"throughput_{spec.throughput_unit}"
        best = max(rows, key=lambda r: r[metric if metric == "mfu" else throughput] or 0.0)
        if metric == "mfu":
            ratios.append(Ratio(f"{args.model}, best arm {best['arm']}: MFU (one H100/H200 target)",
                                "model FLOP/s", "peak dense bf16 FLOP/s", best["mfu"] if best["mfu"] is not None
                                else float("nan"), target))
        else:
            ratios.append(Ratio(f"{args.model}, best arm {best['arm']}: throughput / {target:,.0f} "
                                f"{spec.throughput_unit} (one H100/H200 target)", spec.throughput_unit,
                                f"{target:,.0f} {spec.throughput_unit}", best[throughput] / target, 1.0))
    text = f" x {args.seq_len} tokens" if spec.kind == "text" else ""
    return BenchResult("train-step", rows=rows, ratios=ratios, notes=[
        f"{args.model}, batch {args.batch}{text}, on {torch.cuda.get_device_name(device) if cuda else 'the CPU'}; "
        f"median of {args.rounds} rounds x {args.steps} steps per arm, interleaved; first_step_s: the first step "
        f"(compilation), never timed"])
