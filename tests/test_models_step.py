"""The training step's recipe (hpcbench.models.step): which settings a device gets, the micro-batch search,
and the torch adapters run for real on the CPU (the CUDA parts, fused AdamW and the memory probe, need a GPU)."""

from __future__ import annotations

import pytest
import torch

from hpcbench.core.errors import ConfigError
from hpcbench.models import MODELS
from hpcbench.models.step import (StepRecipe, StepSettings, autocast, largest_micro_batch, make_optimizer, optimizer_options,
                                  prepare_inputs, prepare_model, step_settings, timed_first_step)


# -- which settings a device gets -----------------------------------------------------------------------------

def test_auto_recipe_is_the_tuned_step_on_cuda_and_the_plain_one_on_cpu():
    recipe = StepRecipe()
    gpu = step_settings(recipe, "cuda", "image")
    assert (gpu.dtype, gpu.channels_last, gpu.optimizer_options) == ("bfloat16", True, (("fused", True),))
    cpu = step_settings(recipe, "cpu", "image")
    assert (cpu.dtype, cpu.channels_last, cpu.optimizer_options) == ("float32", False, (("foreach", True),))
    # NHWC is a convolution layout: token ids and grids keep theirs, on any device
    assert not step_settings(recipe, "cuda", "text").channels_last
    assert not step_settings(StepRecipe(channels_last="on"), "cpu", "grid").channels_last


def test_explicit_choices_override_the_device():
    s = step_settings(StepRecipe(precision="bf16", channels_last="on", optimizer="sgd", compile=True), "cpu", "image")
    assert (s.dtype, s.channels_last, s.optimizer, s.compile) == ("bfloat16", True, "sgd", True)
    assert step_settings(StepRecipe(precision="fp32", channels_last="off"), "cuda", "image").dtype == "float32"
    assert optimizer_options("sgd", "cuda") == {"foreach": True}  # fused SGD needs torch >= 2.4; AdamW's is older
    assert s.labels()["optimizer_options"] == "foreach=True"


@pytest.mark.parametrize("field, value", [("precision", "fp16"), ("channels_last", True), ("optimizer", "lamb"),
                                          ("lr", 0.0)])
def test_a_bad_recipe_names_its_field(field, value):
    with pytest.raises(ConfigError, match=field):
        StepRecipe(**{field: value})


# -- the micro-batch from memory ------------------------------------------------------------------------------

def test_the_search_doubles_to_the_largest_batch_within_the_budget():
    # a step's memory: 1 GiB of weights and state, 0.3 GiB per sample
    calls = []

    def peak(b):
        calls.append(b)
        return (1 << 30) + b * int(0.3 * (1 << 30))

    choice = largest_micro_batch(peak, start=4, limit=256, budget_bytes=16 << 30)
    assert choice.batch == 32  # 1 + 0.3 * 32 = 10.6 GiB fits, 64 needs 20.2
    assert calls == [4, 8, 16, 32, 64]  # stops at the first size over budget
    assert "micro-batch 32" in choice.describe() and "64: 20.2 GiB" in choice.describe()
    assert largest_micro_batch(peak, start=4, limit=16, budget_bytes=16 << 30).batch == 16  # the limit caps it


def test_out_of_memory_ends_the_search_and_nothing_fitting_is_an_error():
    oom_above_8 = lambda b: None if b > 8 else b  # noqa: E731
    choice = largest_micro_batch(oom_above_8, start=2, limit=1024, budget_bytes=1 << 40)
    assert choice.batch == 8 and choice.tried[-1] == (16, None) and "16: OOM" in choice.describe()
    with pytest.raises(ConfigError, match="not even micro-batch 2 fits"):
        largest_micro_batch(lambda b: None, start=2, limit=8, budget_bytes=1 << 30)
    with pytest.raises(ConfigError, match="micro_batch"):
        largest_micro_batch(lambda b: 0, start=8, limit=4, budget_bytes=1)


# -- the torch adapters, on the CPU ---------------------------------------------------------------------------

def test_channels_last_and_bf16_autocast_reach_the_model_and_its_inputs():
    spec = MODELS.get("resnet_tiny")
    settings = step_settings(StepRecipe(precision="bf16", channels_last="on"), "cpu", spec.kind)
    torch.manual_seed(0)
    inner = spec.build()
    seen = []
    inner.conv1.register_forward_hook(lambda mod, args, out: seen.append((args[0], out.dtype)))
    model = prepare_model(inner, settings)
    assert inner.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    x, y = spec.synthetic_batch(2, device=torch.device("cpu"), seed=0, image_size=32)
    out = model(x)  # plain NCHW fp32 in, as an experiment's loop hands it over
    (arrived, dtype), = seen
    assert arrived.is_contiguous(memory_format=torch.channels_last) and not arrived.is_contiguous()
    assert dtype == torch.bfloat16  # the convolution ran under autocast
    assert out.dtype == torch.float32  # and the loss sees float32, as under autocast
    assert prepare_inputs(x, settings).is_contiguous(memory_format=torch.channels_last)
    # the plain CPU step leaves the model as it was: no wrapper, no layout change
    plain = spec.build()
    assert prepare_model(plain, step_settings(StepRecipe(), "cpu", spec.kind)) is plain


def test_the_wrap_comes_between_the_layout_and_the_compile():
    order = []
    settings = step_settings(StepRecipe(precision="bf16"), "cpu", "text")
    model = prepare_model(torch.nn.Linear(2, 2), settings, wrap=lambda m: order.append(type(m).__name__) or m)
    assert order == ["TunedForward"] and model.model.weight.shape == (2, 2)


def test_the_optimizer_is_the_settings_one_and_trains():
    spec = MODELS.get("gpt2_tiny")
    settings = step_settings(StepRecipe(lr=1e-2), "cpu", spec.kind)
    torch.manual_seed(0)
    model = prepare_model(spec.build(), settings)
    opt = make_optimizer(model.parameters(), settings)
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["foreach"] is True and opt.defaults["lr"] == 1e-2
    x, y = spec.synthetic_batch(4, device=torch.device("cpu"), seed=0, seq_len=16)

    def step():
        with autocast(settings):
            loss = spec.loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    first, seconds = timed_first_step(step, lambda: None)
    assert seconds > 0
    losses = [step() for _ in range(20)]
    assert losses[-1] < first  # the same batch, learnt


def test_compiled_ddp_model_gives_the_eager_losses_with_accumulation(tmp_path):
    # torch.compile for real (inductor's C++ kernels on the CPU) around DDP (gloo, a world of 1) around the
    # tuned forward, as batch_scaling builds it: the switch changes speed, never the result, and no_sync
    # still reaches DDP through the compiled wrapper.
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    # a small MLP: inductor's compile time grows with the graph (gpt2_tiny took 30 s on a cold cache)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
    loss_fn = torch.nn.functional.cross_entropy
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        losses = {}
        for compiled in (False, True):
            settings = step_settings(StepRecipe(optimizer="sgd", lr=1e-1, precision="bf16", compile=compiled), "cpu",
                                     "text")
            torch.manual_seed(0)
            mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
            model = prepare_model(mlp, settings, wrap=DDP)
            opt = make_optimizer(model.parameters(), settings)

            def step():
                with model.no_sync():  # two micro-steps, one synchronisation
                    loss_fn(model(x), y).backward()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss.item()

            first, _ = timed_first_step(step, lambda: None)
            losses[compiled] = [first] + [step() for _ in range(3)]
            if compiled:
                assert isinstance(model._orig_mod, DDP)  # really the compiled wrapper, around DDP
        assert losses[True] == pytest.approx(losses[False], rel=1e-4)
        assert losses[False][-1] < losses[False][0]
    finally:
        dist.destroy_process_group()


def test_the_step_benchmarks_arms_differ_from_the_recipe_only_in_what_they_name():
    from hpcbench.bench.train_step import arm_settings

    tuned = step_settings(StepRecipe(), "cuda", "image")
    assert arm_settings("tuned", "cuda", "image") == tuned
    plain = arm_settings("plain", "cuda", "image")
    assert (plain.dtype, plain.channels_last, plain.optimizer_options, plain.compile) == (
        "float32", False, (("foreach", False),), False)
    assert arm_settings("compiled", "cuda", "image") == StepSettings(**{**tuned.__dict__, "compile": True})
