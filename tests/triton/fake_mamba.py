"""A stand-in for mamba_ssm, written here for the tests of `python -m zgate.mindspeed_ops
--upstream`: the layout and the kind of code the copy must handle (an autotuned kernel, its
launcher, a helper imported from another upstream file, functions and imports it must leave
out, copyright lines in module docstrings). None of it is upstream's code."""
import os

FILES = {
    "mamba_ssm/__init__.py": '__version__ = "0.0.test"\n',
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/triton/__init__.py": "",
    "mamba_ssm/ops/triton/mamba3/__init__.py": "",
    "mamba_ssm/ops/triton/mamba3/utils.py": '''"""Helpers.

Copyright (c) 2025, Helper Lab
"""
import triton
import triton.language as tl

HALF: tl.constexpr = tl.constexpr(0.5)
UNUSED = 3


@triton.jit
def halve(x):
    return x * HALF


def left_out():
    return tl
''',
    "mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py": '''"""Kernels.

Copyright (c) 2026, Kernel Lab
"""
from typing import Tuple
import math

import torch
from einops import rearrange

import triton
import triton.language as tl
from mamba_ssm.ops.triton.mamba3.utils import halve, left_out


@triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def mamba3_siso_bwd_kernel_dzdo(DO, Z, O, DZ, DOS, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = tl.load(Z + offs, mask=mask).to(tl.float32)
    s = tl.sigmoid(z)
    do = tl.load(DO + offs, mask=mask).to(tl.float32) * s
    o = tl.load(O + offs, mask=mask).to(tl.float32)
    tl.store(DZ + offs, do * o * (1 + z * (1 - s)), mask=mask)
    tl.store(DOS + offs, halve(do * z) * 2, mask=mask)


def compute_dzdo(
    do: torch.Tensor, z: torch.Tensor, o: torch.Tensor, chunk_size: int = 64,
) -> Tuple[torch.Tensor, torch.Tensor]:
    dz, dos = torch.empty_like(z, dtype=do.dtype), torch.empty_like(do)
    n = do.numel()
    mamba3_siso_bwd_kernel_dzdo[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
        do, z, o, dz, dos, n)
    return dz, dos


def mamba3_siso_bwd_kernel_other():
    return rearrange, math, left_out
''',
}
COPIED = {"halve", "mamba3_siso_bwd_kernel_dzdo", "compute_dzdo"}   # and the constant HALF
NOTICES = ["Copyright (c) 2026, Kernel Lab", "Copyright (c) 2025, Helper Lab"]


def write(root):
    """The stand-in under `root` (a checkout's layout); returns root."""
    for rel, text in FILES.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return root
