"""The training step: a plain eager fp32 step against the experiments' tuned recipe, side by side.

Run: ``python -m hpcbench.bench.train_step [--model M] [--batch B] [--arms plain,tuned,compiled] [--rounds 3]``

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
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpcbench.bench.gpu_check import STEP_FLOPS, TrainPlan, mfu
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; allowed: {list(ARMS)}")
    if "plain" not in arms:
        raise SystemExit("--arms: needs plain, the reference of the ratios")
    for name in ("warmup", "steps", "rounds"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name}: {getattr(args, name)}; allowed: >= 1")

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
        print(f"[train_step] {arm}: first step {built[arm]['first_s']:.2f} s", flush=True)
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
        s = built[arm]["settings"]
        rows.append({"arm": arm, "step_s": med, "throughput": per_step / med, "vs_plain": base / med,
                     "mfu": mfu(flops, med, peak) if flops else None, "first_step_s": built[arm]["first_s"],
                     "settings": s.labels(), "steps_s": times[arm]})
    print(f"\n{args.model}, batch {args.batch}" + (f" x {args.seq_len} tokens" if spec.kind == "text" else "")
          + f", on {torch.cuda.get_device_name(device) if cuda else 'the CPU'}; median of {args.rounds} rounds x "
          f"{args.steps} steps per arm, interleaved\n")
    print(f"{'arm':9s} {'precision':9s} {'NHWC':5s} {'optimizer':24s} {'step ms':>8s} "
          f"{spec.throughput_unit:>11s} {'x plain':>8s} {'MFU':>6s} {'first step s':>13s}")
    for r in rows:
        s = r["settings"]
        util = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"{r['arm']:9s} {s['dtype']:9s} {str(s['channels_last']):5s} "
              f"{s['optimizer'] + ' ' + s['optimizer_options']:24s} {r['step_s'] * 1e3:8.1f} "
              f"{r['throughput']:11,.0f} {r['vs_plain']:8.2f} {util:>6s} {r['first_step_s']:13.2f}")
    print()
    tuned = next((r for r in rows if r["arm"] == "tuned"), None)
    if tuned is not None:
        print(f"target: tuned step {tuned['vs_plain']:.2f}x the plain one (target >= {TUNED_TARGET:.1f}x: "
              f"{'MET' if tuned['vs_plain'] >= TUNED_TARGET else 'MISSED'})")
    if cuda and args.model in GPU_TARGETS:
        metric, target = GPU_TARGETS[args.model]
        best = max(rows, key=lambda r: r[metric] or 0.0)
        got = best[metric]
        fmt = (lambda v: f"{v:.1%}") if metric == "mfu" else (lambda v: f"{v:,.0f}")
        verdict = "MET" if got is not None and got >= target else "MISSED"
        print(f"target (one H100/H200): {args.model}, best arm {best['arm']}: {metric} "
              f"{fmt(got) if got is not None else 'n/a'} (target >= {fmt(target)}: {verdict})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
