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

Math in float32, one of two recipes chosen by the output precision (OUT16, a constexpr that
plan.kernel_arguments sets when every output is 16-bit):

float32 outputs, the accurate recipe of src/gate_math.h:
    e = exp(-|z|), d = 1+e; z >= 0: s = 1/d, 1-s = e/d; z < 0: s = e/d, 1-s = 1/d
    dz = (dout*o) * (s + (z*s)*(1-s)),  dos = dout * (z*s),  out = o * (z*s)
1 - s is never formed by subtraction, so there is no cancellation for large z.

16-bit outputs (half an ulp is 2^-9 or 2^-12 relative), the 16-bit recipe:
    E = exp(min(z, 80)), s = E / (E + 1)
    dz = ((dout*s)*o) * ((z - z*s) + 1),  dos = (dout*s) * z,  out = (o*s) * z
One division, no selects. exp never overflows (E <= e^80; s rounds to 1 from z = 17 on, where
z - z*s is exactly 0) and s keeps its relative precision down to the float32 subnormals, as
exp(-|z|) does. z - z*s = z(1-s) loses z * 2^-24 absolutely for large z against 1 + z(1-s)
near 1; near the root of 1 + z(1-s) (z ~ -1.2785) the sum cancels to about 2^-24 of the
elementwise scale, within the float32 bound plus half an ulp of the output. The min
propagates NaN (PropagateNan.ALL: one vmins on the NPU; the NaN-ignoring form becomes a
compare and two selects).

The 16-bit recipe multiplies by z last in dos and out, so that a subnormal z times a large dout
or o still gives its result (the accurate recipe rounds z*s first and loses it when
|dout z s| is normal but |z s| is not). Each output is rounded once to its own dtype.
The compiler rewrites arithmetic and plans buffers by the order of the source: the final
HIVM IR (python -m zgate.triton.ascend, costmodel.py) is what to check after any change.
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
                BACKWARD: tl.constexpr, OUT16: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """BACKWARD: (dout, z, o) -> (dz, dos). Forward: (z, o) -> out, written through dz_ptr;
    dout_ptr and dos_ptr are not touched. OUT16: every output is 16-bit (the 16-bit recipe)."""
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

        if OUT16:
            ez = tl.exp(tl.minimum(z, 80.0, propagate_nan=tl.PropagateNan.ALL))
            s = ez / (ez + 1.0)
        else:
            e = tl.exp(tl.abs(z) * -1.0)     # -tl.abs(z) costs a vmuls and a vadds
            d = 1.0 + e
            pos = z >= 0.0
            s = tl.where(pos, 1.0, e) / d
        if BACKWARD:
            dout_at = dout_ptr + _tile_base(qa, qb, r0, c0, dout_sa, dout_sb, dout_sr) + (
                rows * dout_sr + cols)
            dos_at = dos_ptr + _tile_base(qa, qb, r0, c0, dos_sa, dos_sb, dos_sr) + (
                rows * dos_sr + cols)
            dout = tl.load(dout_at, mask=mask, other=0.0).to(tl.float32)
            if OUT16:
                ts = dout * s
                dz = (ts * o) * ((z - z * s) + 1.0)
                dos = ts * z
            else:
                zs = z * s
                dz = (dout * o) * (s + zs * (tl.where(pos, e, 1.0) / d))
                dos = dout * zs
            tl.store(dz_at, dz.to(dz_ptr.dtype.element_ty), mask=mask)
            tl.store(dos_at, dos.to(dos_ptr.dtype.element_ty), mask=mask)
        elif OUT16:
            tl.store(dz_at, ((o * s) * z).to(dz_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(dz_at, (o * (z * s)).to(dz_ptr.dtype.element_ty), mask=mask)
