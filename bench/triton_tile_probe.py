"""Time zgate.triton on CUDA at several GPU tile sizes (plan.GPU_TILE), for choosing it.
    python3 bench/triton_tile_probe.py   (from the repository root, on a GPU machine)"""
import sys, torch, triton
sys.path.insert(0, "python")
from triton.testing import do_bench
import zgate.triton as zt
from zgate.triton import plan
for shape in [(4, 4096, 64, 64), (2, 8192, 32, 128), (2, 2048, 40, 80)]:
    for dt in (torch.bfloat16, torch.float32):
        x = [torch.randn(shape, device="cuda", dtype=dt) for _ in range(5)]
        res = []
        for tile in (1024, 2048, 4096, 8192):
            plan.GPU_TILE = tile
            f = lambda: zt.bwd(x[0], x[1], x[2], dz=x[3], dout_scaled=x[4])
            f(); torch.cuda.synchronize()
            ms = do_bench(f, warmup=25, rep=100)
            res.append("%d: %.0f GB/s" % (tile, 5 * x[0].numel() * x[0].element_size() / ms / 1e6))
        print(shape, dt, "  ".join(res), flush=True)
plan.GPU_TILE = 2048
