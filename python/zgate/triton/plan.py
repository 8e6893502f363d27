"""How one call maps onto the Triton kernel: no Triton import, so it is testable anywhere.

collapse() is validate.c's rule (zg_collapse, the one for every backend, documented in
zgate_internal.h) on a call of any rank 0..8 (collapse_dims). The kernel takes the result
when it has at most four dims (qa, qb, rows, cols) and unit-stride columns in every tensor;
otherwise every tensor that is not compact goes through a compact copy, and the compact call
is one run. choose_tiles() picks the tile: no search, no autotuning.

The MindSpeed-Ops tree (python -m zgate.mindspeed_ops) takes the backward's pieces of this
file whole (mindspeed_ops/specialise.py names them): their docstrings and comments describe
the operator, not zgate.
"""
import functools
import math
from typing import NamedTuple, Sequence, Tuple

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
INT32_MAX = 2 ** 31 - 1
MIN_BLOCK_C = 16          # 32 bytes of a 16-bit type: the NPU's UB alignment
# The kernel's pointer slots, in the backward's order (do, z, o, dz, do_scaled).
BACKWARD_SLOTS = ("dout", "z", "o", "dz", "dos")
# The kernel slot of each of an op's tensors, in the op's public order.
SLOTS = {"bwd": BACKWARD_SLOTS, "fwd": ("o", "z", "dz")}
N_INPUTS = {"bwd": 3, "fwd": 2}
MAX_NDIM = 8              # ZGATE_MAX_NDIM: the ranks every entry takes are 0..8


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


def collapse_dims(shape: Sequence[int], strides: Sequence[Sequence[int]], first_output: int):
    """(sizes, per-tensor strides), outermost dim first, of tensors of one `shape` with the
    given element strides: size-1 dims dropped, the rest ordered by strides[first_output]
    (outermost first), neighbours merged where every tensor walks them contiguously. Dense
    tensors become one row of n elements; Z as a view into the input projection (strides
    (L*P, P, D, 1)) beside dense tensors, B*L rows of H*D columns with Z's row stride P."""
    dims = sorted((d for d, n in enumerate(shape) if n > 1),
                  key=lambda d: strides[first_output][d])      # stable: ties keep dim order
    sizes, out = [], [[] for _ in strides]
    for d in reversed(dims):
        if sizes and all(o[-1] == s[d] * shape[d] for o, s in zip(out, strides)):
            sizes[-1] *= shape[d]
            for o, s in zip(out, strides):
                o[-1] = s[d]                                     # the inner one's
        else:
            sizes.append(shape[d])
            for o, s in zip(out, strides):
                o.append(s[d])
    if not sizes:                                                # one element, or none
        return [math.prod(shape)], [[0] for _ in strides]
    return sizes, out


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]], first_output: int = 0):
    """The kernel's Layout of the call, or None where collapse_dims leaves more than four
    dims or a column stride other than 1 (the caller copies the tensors that are not
    compact)."""
    sizes, st = collapse_dims(shape, strides, first_output)
    if len(sizes) > 4 or (sizes[-1] > 1 and any(s[-1] != 1 for s in st)):
        return None
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    st = [[0] * pad + s[:-1] for s in st]
    return Layout(tuple(sizes), tuple(tuple(s) for s in st))


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
# (float32 backward: 180,864 of 196,608 bytes, the fullest mix 196,608; 8192 overflows or
# drops to single buffering), 8192 for the forward on 16-bit tensors (196,608 bytes; each
# vector instruction's fixed cost spread over twice the elements). tests/ascend checks it
# for every combination and target.
NPU_TILE = 4096
NPU_TILE_FWD_16BIT = 8192
# GPU, one program per tile (docs/performance.md compares tile sizes).
GPU_TILE = 1024


def npu_tile(op: str, dtypes: Sequence[str]) -> int:
    """The NPU tile of an op on tensors of these dtypes (names as in DTYPE_BYTES)."""
    if op == "fwd" and all(DTYPE_BYTES[d] == 2 for d in dtypes):
        return NPU_TILE_FWD_16BIT
    return NPU_TILE


@functools.lru_cache(maxsize=512)
def plan_call(shape: Tuple[int, ...], strides: Tuple[Tuple[int, ...], ...], tile: int,
              first_output: int):
    """(copied, layout, tiles) of one call, cached by shape, strides and tile size (a call
    repeated in a training step is planned once). first_output: the index in `strides` of the
    first output, whose strides order the dims (no default: ordering by an input's strides
    gives another plan where that input is permuted). copied[i]: tensor i goes through a
    compact copy, because collapse() cannot take the call as it is; the layout is that of
    what the kernel then sees."""
    compact = compact_strides(shape)
    layout = collapse(shape, strides, first_output)
    copied = (False,) * len(strides) if layout else tuple(
        any(n > 1 and s != c for n, s, c in zip(shape, st, compact)) for st in strides)
    layout = layout or collapse(shape, [compact] * len(strides), first_output)
    return copied, layout, choose_tiles(layout, tile)


def backward_arguments(ptrs, layout, tiles):
    """(runtime args by name, constexprs by name) of the backward for tensors (do, z, o, dz,
    do_scaled) in `ptrs` (anything with data_ptr() and element_size()) seen as `layout`.
    OUT16: both outputs are 16-bit (the kernel's 16-bit recipe)."""
    args = dict(zip(("n_qa", "n_qb", "n_rows", "n_cols"), layout.sizes))
    for name, ptr, (sa, sb, sr) in zip(BACKWARD_SLOTS, ptrs, layout.strides):
        args.update({name + "_ptr": ptr, name + "_sa": sa, name + "_sb": sb, name + "_sr": sr})
    consts = {"OUT16": all(p.element_size() == 2 for p in ptrs[3:]),
              "BLOCK_R": tiles.block_r, "BLOCK_C": tiles.block_c}
    return args, consts


def kernel_arguments(op, ptrs, layout, tiles):
    """(runtime args by name, constexprs by name) of gate_kernel. `ptrs`: the op's tensors in
    its public order. The forward (o, z, out) runs in the backward's slots, out in dz's; the
    unused dout and dos get z's pointer and strides (the kernel does not touch them), and
    OUT16 follows out alone."""
    if op == "bwd":
        args, consts = backward_arguments(ptrs, layout, tiles)
    else:
        by_slot = dict(zip(SLOTS[op], zip(ptrs, layout.strides)))
        slots = [by_slot.get(name, by_slot["z"]) for name in BACKWARD_SLOTS]
        args, consts = backward_arguments([p for p, _ in slots],
                                          Layout(layout.sizes, tuple(s for _, s in slots)), tiles)
        consts["OUT16"] = by_slot["dz"][0].element_size() == 2
    consts["BACKWARD"] = op == "bwd"
    return args, consts
