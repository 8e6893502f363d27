"""Helpers shared by the PyTorch tests (imported only where PyTorch is installed)."""
import numpy as np
import torch

from zg_oracle import BF16, inputs

TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def np_of(t):
    """A NumPy copy of a tensor, keeping bfloat16 as ml_dtypes.bfloat16."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


def tinputs(rng, shape, dtype, device="cpu"):
    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)
                 for a in inputs(rng, shape))


def cuda_ready():
    import zgate
    if not torch.cuda.is_available():
        return False, "no CUDA device visible to PyTorch"
    if not zgate.info()["cuda_built"]:
        return False, "libzgate was built without CUDA"
    return True, ""
