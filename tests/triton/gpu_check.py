"""zgate.triton on an NVIDIA GPU (upstream Triton): the case list on CUDA tensors (the
acceptance run, precision only), judged against the float64 reference and against zgate's
CUDA kernels on the same inputs (golden), and a tensor of more than 2^31 elements (64-bit
offsets). Run on a GPU machine:
    python3 tests/triton/gpu_check.py OUTDIR
Exit status 0 when everything passed."""
import os
import sys
import time

import torch

import zgate
from zgate import acceptance, cases  # the installed package (zgate.bwd needs its binding)
from zgate.acceptance.device import from_torch
import zgate.triton as zt


def big_case():
    """(17, 16384, 128, 64) bfloat16: 2.28e9 elements, past 2^31; first, last and random rows
    judged by zgate's policy (the Triton kernel's bound) against the float64 reference."""
    shape = (17, 16384, 128, 64)
    g = torch.Generator(device="cuda").manual_seed(7)
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
    z = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) * 4)
    o = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
    torch.cuda.synchronize()
    t0 = time.time()
    dz, dos = zt.bwd(dout, z, o)
    torch.cuda.synchronize()
    secs = time.time() - t0
    worst, ok = 0.0, True
    idx = [0, 1, shape[0] - 1] + torch.randint(0, shape[0], (3,)).tolist()
    for b in idx:
        for l in (0, shape[1] - 1, int(torch.randint(0, shape[1], (1,)))):
            host = [from_torch(t[b, l]) for t in (dout, z, o, dz, dos)]
            refs = zgate.reference_bwd(*host[:3])
            for name, got, ref in zip(("dz", "dout_scaled"), host[3:], refs):
                st = cases.judge(name, got, ref, *host[:3], cases.TRITON_F32_ULPS)
                worst, ok = max(worst, st["max_bound_ratio"]), ok and st["ok"]
    print("big (17,16384,128,64) bf16: %.2e elements in %.3f s (first call, compile included), "
          "worst %.2f of the bound on %d sampled rows" % (dout.numel(), secs, worst, len(idx) * 3))
    return ok


def ranks_case():
    """Ranks 1, 3, 5 and 8, dense and with every tensor's innermost dim strided, float32 and
    bfloat16: zgate.triton's outputs judged by the Triton kernel's bound against the float64
    reference, as zgate.bwd's (the CUDA kernels) by zgate's."""
    ok = True
    for rank in (1, 3, 5, 8):
        shape = (3, 2, 1, 5, 2, 3, 1, 40)[-rank:]
        for dtype in (torch.float32, torch.bfloat16):
            for step in (1, 2):
                g = torch.Generator(device="cuda").manual_seed(rank)
                wide = shape[:-1] + (step * shape[-1],)
                ins = [(torch.randn(wide, device="cuda", generator=g) * s).to(dtype)[..., ::step]
                       for s in (1, 4, 2)]
                host = [from_torch(t) for t in ins]
                refs = zgate.reference_bwd(*host)
                for impl, bound in ((zt.bwd, cases.TRITON_F32_ULPS), (zgate.bwd, cases.F32_ULPS)):
                    for name, got, ref in zip(("dz", "dout_scaled"), impl(*ins), refs):
                        st = cases.judge(name, from_torch(got), ref, *host, bound)
                        if not st["ok"] or tuple(got.shape) != shape:
                            print("ranks: %s rank %d %s step %d %s FAILED: %s" % (
                                impl.__module__, rank, dtype, step, name, st))
                            ok = False
    print("ranks 1, 3, 5, 8 (dense, strided innermost; f32, bf16): %s" % ("ok" if ok else "FAIL"))
    return ok


def main(out):
    os.makedirs(out, exist_ok=True)
    gold = os.path.join(out, "cuda-golden.npz")
    run = ["--device", "cuda", "--quick", "--precision-only", "--output"]
    rc = acceptance.main(run + [os.path.join(out, "precision-cuda.md"), "--save-golden", gold])
    rc |= acceptance.main(run + [os.path.join(out, "precision-triton-vs-cuda.md"), "--impl",
                                 "triton", "--golden", gold])
    ok = ranks_case() & big_case()
    print("gpu_check: precision rc %d, big case %s" % (rc, "ok" if ok else "FAIL"))
    return 0 if rc == 0 and ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/gpu-out"))
