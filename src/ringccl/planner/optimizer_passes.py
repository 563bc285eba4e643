"""The optimizer step's HBM passes, pass by pass as Megatron-LM's mixed-precision optimizer runs
them (the dated Megatron-LM presets, ``megatron-2021`` and ``megatron-2022``,
:mod:`.framework_eras`); other frameworks keep the generic count of
:func:`ringccl.planner.compute.optimizer_seconds`.

Megatron-LM ``megatron/optimizer/optimizer.py`` ``Float16OptimizerWithFloat16Params.step``
(``aed2f75e``, 2021; ``2755bcb8``, 2022; the same passes in ``285068c8``, 2023) runs, once per
step, after the data-parallel reduction:

1. ``_copy_model_grads_to_main_grads``: ``main_param.grad = model_param.main_grad.float()``
   (contiguous buffers) or ``model_param.grad.float()`` (autograd's ``.grad``): a cast,
   read ``B_g`` + write 4, or nothing when the gradient is already fp32 (``.float()`` of an
   fp32 tensor returns it).
2. ``_unscale_main_grads_and_check_for_nan`` (only with a grad scaler: fp16's loss scaling;
   ``megatron/optimizer/__init__.py`` ``get_megatron_optimizer`` gives bf16 none):
   ``torch._amp_foreach_non_finite_check_and_unscale_`` over the main gradients, read 4 +
   write 4.
3. ``clip_grad_norm`` (``megatron/optimizer/clip_grads.py`` ``clip_grad_norm_fp32``):
   ``amp_C.multi_tensor_l2norm`` reads every main gradient (4); then, when the norm exceeds
   ``--clip-grad`` (1.0; ``clip_coeff < 1``, as in the early steps a throughput run times),
   ``amp_C.multi_tensor_scale`` scales them in place (read 4 + write 4).
4. the Adam step, apex ``FusedAdam`` (``apex/optimizers/fused_adam.py``,
   ``multi_tensor_adam``): read the fp32 parameter, gradient, ``exp_avg`` and ``exp_avg_sq``
   (16), write the parameter and both moments (12): 28.
5. ``_copy_main_params_to_model_params``: ``amp_C.multi_tensor_scale`` by 1.0 from the fp32
   main parameters to the 16-bit model ones, read 4 + write ``B``.

And once per step before the forward (``megatron/training.py`` ``train_step``): with contiguous
gradient buffers, ``DistributedDataParallel.zero_grad_buffer`` (``megatron/model/
distributed.py``: ``buffer_.zero()``), write ``B_g`` per parameter the rank holds; without them,
``optimizer.zero_grad(set_to_none=True)``: no pass.

``B`` is the model's 16-bit dtype (2 bytes), ``B_g`` the gradient buffer's dtype (the preset's
``reduce_dtype``: fp32 with bf16, fp16 with fp16, :func:`.framework_eras.megatron_reduce`).
Contiguous buffers: always in 2022 (``megatron/arguments.py`` ``--no-contiguous-buffers-in-
local-ddp``, store_false); in 2021 only when gradients accumulate in fp32 (``aed2f75e``
``megatron/arguments.py``: ``--use-contiguous-buffers-in-ddp`` is store_true, and
``--accumulate-allreduce-grads-in-fp32``, forced by ``--bf16``, turns it on). With fp32
training (``FP32Optimizer``) passes 1, 2 and 5 do not run.

Bytes per parameter (the zeroing over the parameters the rank holds, the rest over those it
updates; with the distributed optimizer, ``megatron/optimizer/distrib_optimizer.py``, passes
1–5 run on the rank's shard):

=========================================== ====== ==== ======= ===== ===== ==== ==== =====
configuration                               zero   copy unscale norm  clip  Adam back total
=========================================== ====== ==== ======= ===== ===== ==== ==== =====
2022 bf16 (fp32 main-grad buffer)           4      0    0       4     8     28   6    50
2022 fp16, fp16 buffer (loss scaling)       2      6    8       4     8     28   6    62
2022 fp16, fp32 buffer (loss scaling)       4      0    8       4     8     28   6    58
2021 fp16, autograd's ``.grad`` (no buffer) 0      6    8       4     8     28   6    60
fp32 training (``FP32Optimizer``)           4      0    0       4     8     28   0    44
=========================================== ====== ==== ======= ===== ===== ==== ==== =====
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OptimizerPass", "MEGATRON_ERAS", "ADAM_BYTES", "megatron_optimizer_passes",
           "megatron_optimizer_bytes"]

#: the dated Megatron-LM presets whose optimizer step is counted pass by pass
MEGATRON_ERAS = ("megatron-2021", "megatron-2022")

#: apex FusedAdam on fp32 states: read parameter, gradient, exp_avg, exp_avg_sq; write
#: parameter, exp_avg, exp_avg_sq (module doc, pass 4)
ADAM_BYTES = 28.0


@dataclass(frozen=True)
class OptimizerPass:
    """One pass of the optimizer step.

    Attributes:
        name: "zero_grad_buffer", "copy_grads", "unscale", "grad_norm", "clip", "adam",
            "copy_params".
        bytes_per_parameter: HBM bytes read and written per parameter.
        over: "held" (every parameter the rank holds) or "updated" (its optimizer shard).
    """

    name: str
    bytes_per_parameter: float
    over: str = "updated"


def megatron_optimizer_passes(framework: str, dtype_bytes: int, grad_bytes: int,
                              loss_scaling: bool) -> tuple[OptimizerPass, ...]:
    """The passes of Megatron-LM's optimizer step (module doc and table).

    Args:
        framework: "megatron-2021" or "megatron-2022".
        dtype_bytes: the model's training dtype (2, or 4 for fp32 training).
        grad_bytes: the gradient buffer's dtype (the preset's ``reduce_dtype``).
        loss_scaling: fp16 training (a grad scaler unscales the gradients).
    """
    if framework not in MEGATRON_ERAS:
        raise ValueError(f"framework={framework!r} is not one of {MEGATRON_ERAS}")
    contiguous = framework == "megatron-2022" or grad_bytes == 4
    mixed = dtype_bytes < 4
    copy = grad_bytes + 4.0 if mixed and grad_bytes < 4 else 0.0
    passes = [
        OptimizerPass("zero_grad_buffer", float(grad_bytes) if contiguous else 0.0, "held"),
        OptimizerPass("copy_grads", copy),
        OptimizerPass("unscale", 8.0 if mixed and loss_scaling else 0.0),
        OptimizerPass("grad_norm", 4.0),
        OptimizerPass("clip", 8.0),
        OptimizerPass("adam", ADAM_BYTES),
        OptimizerPass("copy_params", 4.0 + dtype_bytes if mixed else 0.0),
    ]
    return tuple(passes)


def megatron_optimizer_bytes(framework: str, dtype_bytes: int, grad_bytes: int,
                             loss_scaling: bool) -> tuple[float, float]:
    """(bytes per parameter held, bytes per parameter updated) of
    :func:`megatron_optimizer_passes`."""
    passes = megatron_optimizer_passes(framework, dtype_bytes, grad_bytes, loss_scaling)
    held = sum(p.bytes_per_parameter for p in passes if p.over == "held")
    updated = sum(p.bytes_per_parameter for p in passes if p.over == "updated")
    return held, updated
