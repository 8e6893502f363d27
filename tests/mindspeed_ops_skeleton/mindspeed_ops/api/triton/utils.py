"""Stand-in for mindspeed_ops.api.triton.utils: get_available_device as MindSpeed-Ops' tests
call it."""
import functools
import warnings

import triton


@functools.lru_cache(maxsize=None)
def get_available_device():
    """The backend of Triton's active driver ("npu" under triton-ascend on an NPU, "cuda",
    "hip", ...), or "cpu", with a warning, where no driver is active."""
    try:
        return triton.runtime.driver.active.get_current_target().backend
    except BaseException:
        warnings.warn("no Triton device found; falling back to the CPU")
        return "cpu"
