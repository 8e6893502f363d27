"""One launch of the kernel: arguments from a plan, grid from the device. Framework-free:
pointers are any objects Triton accepts (torch tensors, or anything with data_ptr(), a Triton
dtype string and element_size())."""
from . import plan as _plan

# The kernel slot each tensor of an op fills, in the op's public order; the backward's
# order is the kernel's own.
SLOTS = {"bwd": ("dout", "z", "o", "dz", "dos"), "fwd": ("o", "z", "dz")}


def kernel_arguments(op, ptrs, layout, tiles):
    """(runtime args by name, constexprs by name). `ptrs` in the op's public order: bwd
    (dout, z, o, dz, dout_scaled), fwd (o, z, out). The forward's unused slots get z's
    pointer and strides; the kernel does not touch them."""
    slots = SLOTS[op]
    by_slot = dict(zip(slots, zip(ptrs, layout.strides)))
    filler = by_slot["z"]
    args = {}
    n_qa, n_qb, n_rows, n_cols = layout.sizes
    for name in SLOTS["bwd"]:
        ptr, (sa, sb, sr) = by_slot.get(name, filler)
        args[name + "_ptr"] = ptr
        args[name + "_sa"], args[name + "_sb"], args[name + "_sr"] = sa, sb, sr
    args.update(n_qa=n_qa, n_qb=n_qb, n_rows=n_rows, n_cols=n_cols)
    outs = [p for p, n in zip(ptrs, slots) if n in ("dz", "dos")]
    consts = {"BACKWARD": op == "bwd", "LEAN": all(p.element_size() == 2 for p in outs),
              "BLOCK_R": tiles.block_r, "BLOCK_C": tiles.block_c}
    return args, consts


def run(op, ptrs, layout, tiles, grid):
    """Launch `gate_kernel` on `grid` programs (>= 1)."""
    from .kernel import gate_kernel
    args, consts = kernel_arguments(op, ptrs, layout, tiles)
    gate_kernel[(grid,)](**args, **consts)
