"""How one call maps onto the Triton kernel: no Triton import, so it is testable anywhere.

collapse() turns a call's tensors (one 4-D shape, per-tensor element strides) into the
kernel's four levels (qa, qb, rows, cols): size-1 dims are dropped, columns are the longest
innermost run contiguous in every tensor, the other dims become rows and outer indices,
neighbours merged wherever every tensor allows. Dense tensors are one row of n elements; Z
as a view into the input projection (strides (L*P, P, D, 1)) beside dense tensors is B*L
rows of H*D columns, Z's row stride P. choose_tiles() picks the tile: no search, no
autotuning.
"""
import functools
import math
from typing import NamedTuple, Sequence, Tuple

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
INT32_MAX = 2 ** 31 - 1
MIN_BLOCK_C = 16          # 32 bytes of a 16-bit type: the NPU's UB alignment
# The kernel slot of each of an op's tensors, in the op's public order.
SLOTS = {"bwd": ("dout", "z", "o", "dz", "dos"), "fwd": ("o", "z", "dz")}


class Layout(NamedTuple):
    """The kernel's four levels: sizes (n_qa, n_qb, n_rows, n_cols) and, per tensor,
    strides (sa, sb, sr) in elements (columns have stride 1)."""
    sizes: Tuple[int, int, int, int]
    strides: Tuple[Tuple[int, int, int], ...]


class Tiles(NamedTuple):
    block_r: int
    block_c: int
    n_tiles: int


def compact_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """Element strides of a compact row-major tensor of `shape`."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]]):
    """Layout of tensors of one 4-D `shape` with the given element strides, or None when some
    tensor's innermost non-trivial dim is not contiguous (the caller copies that tensor).
    Once the columns are taken at most three dims remain, so at most three levels."""
    dims = ([(n, [s[i] for s in strides]) for i, n in enumerate(shape) if n != 1]
            or [(1, [1] * len(strides))])                   # every dim of size 1
    n_cols, inner = dims.pop()
    if any(s != 1 for s in inner):
        return None
    while dims and all(s == n_cols for s in dims[-1][1]):   # the contiguous run goes on
        n_cols *= dims.pop()[0]
    levels = []                                              # (size, strides), inner first
    while dims:
        n, st = dims.pop()
        if levels and all(s == levels[-1][0] * t for s, t in zip(st, levels[-1][1])):
            levels[-1] = (levels[-1][0] * n, levels[-1][1])
        else:
            levels.append((n, st))
    levels += [(1, [0] * len(strides))] * (3 - len(levels))
    (n_rows, sr), (n_qb, sb), (n_qa, sa) = levels
    return Layout((n_qa, n_qb, n_rows, n_cols), tuple(zip(sa, sb, sr)))


# What a tile costs beyond its elements (the loop step, the scalar base arithmetic, a copy's
# start), in elements: it keeps narrow columns from cutting a long row into many tiny tiles.
TILE_COST = 512


def choose_tiles(layout: Layout, tile_elems: int) -> Tiles:
    """BLOCK_C: the power of two in [MIN_BLOCK_C, tile_elems] whose tiles cost least, padded
    elements plus TILE_COST a tile (larger on ties); BLOCK_R fills the tile, at most the
    rows rounded up to a power of two, and small enough that offsets inside a tile stay
    int32."""
    n_qa, n_qb, n_rows, n_cols = layout.sizes
    row_stride = max(abs(st[2]) for st in layout.strides)
    rows_pow2 = 1 << (max(n_rows, 1) - 1).bit_length()
    best = None
    c = MIN_BLOCK_C
    while c <= tile_elems:
        r = max(1, min(tile_elems // c, rows_pow2))
        while r > 1 and (r - 1) * row_stride + c > INT32_MAX:
            r //= 2
        n_tiles = n_qa * n_qb * -(-n_rows // r) * -(-n_cols // c)
        cost = n_tiles * (r * c + TILE_COST)
        if best is None or cost <= best[0]:
            best = (cost, Tiles(r, c, n_tiles))
        c *= 2
    return best[1]


# Tile sizes in elements. Ascend 910B: the largest power of two that bishengir-compile keeps
# double-buffered in a vector core's 192 KB UB: 4096 for every combination of both ops
# (float32 backward: 196608 of 196608 bytes; 8192 overflows or drops to single buffering),
# 8192 for the forward on 16-bit tensors (196608 bytes; each vector instruction's fixed cost
# spread over twice the elements: 0.81 -> 0.73 of the HBM time at 1.8 TB/s). tests/ascend
# checks it for every combination and target.
NPU_TILE = 4096
NPU_TILE_FWD_16BIT = 8192
# GPU, one program per tile: on an H200, 1024 elements was best or within 1% of best on four
# of six large rows; 4096 and 8192 lost up to 36%.
GPU_TILE = 1024


def npu_tile(op: str, dtypes: Sequence[str]) -> int:
    """The NPU tile of an op on tensors of these dtypes (names as in DTYPE_BYTES)."""
    if op == "fwd" and all(DTYPE_BYTES[d] == 2 for d in dtypes):
        return NPU_TILE_FWD_16BIT
    return NPU_TILE


@functools.lru_cache(maxsize=512)
def plan_call(shape: Tuple[int, ...], strides: Tuple[Tuple[int, ...], ...], tile: int):
    """(copied, layout, tiles) of one call, cached by shape, strides and tile size (a call
    repeated in a training step is planned once). copied[i]: tensor i's innermost dim is not
    contiguous, so it goes through a compact copy; the layout is that of what the kernel
    then sees."""
    copied = tuple(collapse(shape, [s]) is None for s in strides)
    compact = compact_strides(shape)
    layout = collapse(shape, [compact if c else s for c, s in zip(copied, strides)])
    return copied, layout, choose_tiles(layout, tile)


def kernel_arguments(op, ptrs, layout, tiles):
    """(runtime args by name, constexprs by name). `ptrs`: the op's tensors in its public
    order (anything with data_ptr() and element_size()). The forward's unused slots get z's
    pointer and strides; the kernel does not touch them."""
    by_slot = dict(zip(SLOTS[op], zip(ptrs, layout.strides)))
    args = dict(zip(("n_qa", "n_qb", "n_rows", "n_cols"), layout.sizes))
    for name in SLOTS["bwd"]:
        ptr, (sa, sb, sr) = by_slot.get(name, by_slot["z"])
        args.update({name + "_ptr": ptr, name + "_sa": sa, name + "_sb": sb, name + "_sr": sr})
    outs = [p for p, n in zip(ptrs, SLOTS[op]) if n in ("dz", "dos")]
    consts = {"BACKWARD": op == "bwd", "LEAN": all(p.element_size() == 2 for p in outs),
              "BLOCK_R": tiles.block_r, "BLOCK_C": tiles.block_c}
    return args, consts
