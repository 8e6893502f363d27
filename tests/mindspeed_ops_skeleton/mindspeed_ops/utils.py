"""Stand-in for mindspeed_ops.utils: is_arch35 as MindSpeed-Ops' code calls it."""
import functools


@functools.lru_cache(maxsize=None)
def is_arch35():
    """Whether the current NPU is an Ascend 950 (arch35: names Ascend910_95* or Ascend950*);
    False without torch_npu or an NPU."""
    try:
        import torch_npu
        name = torch_npu.npu.get_device_name()
    except Exception:
        return False
    return "Ascend910_95" in name or "Ascend950" in name
