"""The gate as one Triton kernel, for Ascend NPUs (triton-ascend) and NVIDIA GPUs (Triton).

Each tensor is seen as up to four levels, outermost first: two outer indices (qa, qb), rows
and columns; columns are contiguous (stride 1) in every tensor, the other three levels have
per-tensor strides (plan.py collapses a 4-D view to this form). Work is cut into tiles of
BLOCK_R rows x BLOCK_C columns; each program loops over tiles pid, pid + num_programs, ...
so that an NPU grid of one program per vector core keeps its loads in a loop, which is what
triton-ascend double-buffers. On a GPU the grid is one program per tile and the loop runs once.

64-bit arithmetic stays on scalars (a tile's base offset); offsets and masks inside a tile are
int32 (plan.py keeps (BLOCK_R - 1) * row stride + BLOCK_C below 2^31): on an NPU int64 vector
adds and compares fall back to scalar code.

Math in float32, the recipe of src/gate_math.h:
    e = exp(-|z|), r = 1/(1+e); z >= 0: s = r, 1-s = e*r; z < 0: s = e*r, 1-s = r
    dz = (dout*o) * (s*(1 + z*(1-s))),  dos = dout * (z*s),  out = o * (z*s)
1 - s is never formed by subtraction, so there is no cancellation for large z; each output
is rounded once to its own dtype.
"""
import triton
import triton.language as tl


@triton.jit
def _tile_base(qa, qb, r0, c0, sa, sb, sr):
    # int64 scalars: the offset of a tile's first element.
    return qa.to(tl.int64) * sa + qb.to(tl.int64) * sb + r0.to(tl.int64) * sr + c0


@triton.jit
def gate_kernel(dout_ptr, z_ptr, o_ptr, dz_ptr, dos_ptr,
                n_qa, n_qb, n_rows, n_cols,
                dout_sa, dout_sb, dout_sr, z_sa, z_sb, z_sr, o_sa, o_sb, o_sr,
                dz_sa, dz_sb, dz_sr, dos_sa, dos_sb, dos_sr,
                BACKWARD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """BACKWARD: (dout, z, o) -> (dz, dos). Forward: (z, o) -> out, written through dz_ptr;
    dout_ptr and dos_ptr are not touched."""
    col_tiles = tl.cdiv(n_cols, BLOCK_C)
    per_q = tl.cdiv(n_rows, BLOCK_R) * col_tiles
    n_tiles = n_qa * n_qb * per_q
    rows = tl.arange(0, BLOCK_R)[:, None]
    cols = tl.arange(0, BLOCK_C)[None, :]
    for t in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        q = t // per_q
        rem = t % per_q
        qa = q // n_qb
        qb = q % n_qb
        r0 = (rem // col_tiles) * BLOCK_R
        c0 = (rem % col_tiles) * BLOCK_C
        row_lim = tl.minimum(n_rows - r0, BLOCK_R).to(tl.int32)
        col_lim = tl.minimum(n_cols - c0, BLOCK_C).to(tl.int32)
        mask = (rows < row_lim) & (cols < col_lim)

        z_at = z_ptr + _tile_base(qa, qb, r0, c0, z_sa, z_sb, z_sr) + (rows * z_sr + cols)
        o_at = o_ptr + _tile_base(qa, qb, r0, c0, o_sa, o_sb, o_sr) + (rows * o_sr + cols)
        dz_at = dz_ptr + _tile_base(qa, qb, r0, c0, dz_sa, dz_sb, dz_sr) + (rows * dz_sr + cols)
        z = tl.load(z_at, mask=mask, other=0.0).to(tl.float32)
        o = tl.load(o_at, mask=mask, other=0.0).to(tl.float32)

        e = tl.exp(-tl.abs(z))
        r = 1.0 / (1.0 + e)
        er = e * r
        pos = z >= 0.0
        s = tl.where(pos, r, er)
        zs = z * s
        if BACKWARD:
            dout_at = dout_ptr + _tile_base(qa, qb, r0, c0, dout_sa, dout_sb, dout_sr) + (
                rows * dout_sr + cols)
            dos_at = dos_ptr + _tile_base(qa, qb, r0, c0, dos_sa, dos_sb, dos_sr) + (
                rows * dos_sr + cols)
            dout = tl.load(dout_at, mask=mask, other=0.0).to(tl.float32)
            oms = tl.where(pos, er, r)
            dz = (dout * o) * (s + zs * oms)
            dos = dout * zs
            tl.store(dz_at, dz.to(dz_ptr.dtype.element_ty), mask=mask)
            tl.store(dos_at, dos.to(dos_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(dz_at, (o * zs).to(dz_ptr.dtype.element_ty), mask=mask)
