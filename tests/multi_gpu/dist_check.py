"""zgate under torch.distributed: one process per GPU, each rank computes the gate's backward
on its own shard and checks it against float64; the ranks then agree on the verdict through
an NCCL all-reduce. Also, in each rank: tensors on another GPU than the current one (when
there are two or more), a non-default stream, two host threads calling at once, and DTensors
on a mesh of all ranks (Shard on the heads and on the sequence dim, Replicate): no
communication inside zgate's ops, each placement kept, results equal bit for bit to the
undistributed call.

    torchrun --nproc_per_node=NGPU tests/multi_gpu/dist_check.py

Runs with any number of GPUs (one included: then the cross-device case is reported as not
run). NVLink multicast stays off (NCCL_NVLS_ENABLE=0) as the machines' rules require.
"""
import os
import threading

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch
import torch.distributed as dist

import zgate

SHAPE = (2, 1024, 24, 80)  # headdim 80: not a power of two


def reference(dout, z, o):
    """float64 results and each one's elementwise scale (the error unit of OPERATOR.md)."""
    d, zz, oo = dout.double(), z.double(), o.double()
    s = torch.sigmoid(zz)
    dz = d * oo * s * (1 + zz * (1 - s))
    dos = d * s * zz
    dz_scale = (d * oo).abs() * s * (1 + zz.abs() * (1 - s))
    return (dz, dz_scale), (dos, dos.abs())


def max_err(got, ref):
    # error relative to the scale: a bf16 output is off by at most about 2^-8 of it (the
    # per-element ulp policy is tested in tests/cuda and tests/python; this is a smoke check)
    val, scale = ref
    return ((got.double() - val).abs() / scale.clamp_min(1e-30)).max().item()


def check(dout, z, o, dz, dos, what, log):
    rdz, rdos = reference(dout, z, o)
    e = max(max_err(dz, rdz), max_err(dos, rdos))
    ok = bool(torch.isfinite(dz).all() and torch.isfinite(dos).all()) and e < 2 ** -7
    log.append("%s: max rel err %.2e %s" % (what, e, "ok" if ok else "FAIL"))
    return ok


def inputs(device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    mk = lambda: torch.randn(SHAPE, generator=g).to(device=device, dtype=torch.bfloat16)
    return mk(), mk() * 4, mk()


def dtensor_check(rank, world, device, log):
    """device: "cuda:N" under NCCL ("cpu" for a dry run under gloo)."""
    import zgate.torch as zt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh(device.split(":")[0], (world,))
    full = inputs(device, 4000)                     # the same on every rank
    want = zgate.bwd(*full)
    want_out = zgate.fwd(full[2], full[1])
    ok = True
    for placements in ([Shard(2)], [Shard(1)], [Replicate()]):   # heads, sequence
        dout, z, o = (distribute_tensor(t, mesh, placements) for t in full)
        comm = CommDebugMode()
        with comm:
            dz, dos = zgate.bwd(dout, z, o)
            out = zgate.fwd(o, z)
            cz, cs = zt.compute_dzdo(dout, z, o)
        good = comm.get_total_counts() == 0
        for r in (dz, dos, out, cz, cs):
            good &= isinstance(r, DTensor) and r.placements == tuple(placements)
        for got, w in ((dz, want[0]), (dos, want[1]), (out, want_out), (cz, want[0]), (cs, want[1])):
            good &= bool(torch.equal(got.full_tensor(), w))
        log.append("rank %d DTensor %s on %s: %d collectives in zgate's ops, %s"
                   % (rank, placements[0], dist.get_backend(), comm.get_total_counts(),
                      "ok" if good else "FAIL"))
        ok &= good
    return ok


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    ngpu = torch.cuda.device_count()
    dev = rank % ngpu
    torch.cuda.set_device(dev)
    log, ok = [], True

    # 1. this rank's shard, on its own GPU, on a non-default stream
    dout, z, o = inputs("cuda:%d" % dev, 1000 + rank)
    s = torch.cuda.Stream(device=dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        dz, dos = zgate.bwd(dout, z, o)
    s.synchronize()
    ok &= check(dout, z, o, dz, dos, "rank %d shard on GPU %d, side stream" % (rank, dev), log)

    # 2. tensors on another GPU than the current one
    if ngpu >= 2:
        other = (dev + 1) % ngpu
        d2, z2, o2 = inputs("cuda:%d" % other, 2000 + rank)
        with torch.cuda.device(dev):  # current device is not the tensors'
            a, b = zgate.bwd(d2, z2, o2)
        torch.cuda.synchronize(other)
        ok &= a.device.index == other and torch.cuda.current_device() == dev
        ok &= check(d2, z2, o2, a, b, "rank %d tensors on GPU %d, current GPU %d" % (rank, other, dev), log)
    else:
        log.append("rank %d: cross-device case not run (1 GPU)" % rank)

    # 3. two host threads at once, each on its own stream
    results = [None, None]

    def worker(i):
        torch.cuda.set_device(dev)
        dd, zz, oo = inputs("cuda:%d" % dev, 3000 + 10 * rank + i)
        st = torch.cuda.Stream(device=dev)
        st.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(st):
            for _ in range(20):
                a, b = zgate.bwd(dd, zz, oo)
        st.synchronize()
        results[i] = (dd, zz, oo, a, b)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for i, r in enumerate(results):
        ok &= r is not None and check(*r, "rank %d host thread %d" % (rank, i), log)

    # 4. DTensors on a mesh of every rank's GPU: each placement kept, no communication inside
    #    zgate's ops, results equal bit for bit to the undistributed call
    ok &= dtensor_check(rank, world, "cuda:%d" % dev, log)

    verdict = torch.tensor([0 if ok else 1], device="cuda:%d" % dev)
    dist.all_reduce(verdict)
    for line in log:
        print(line, flush=True)
    if rank == 0:
        print("dist_check: world %d, GPUs %d, failing ranks %d -> %s"
              % (world, ngpu, verdict.item(), "PASS" if verdict.item() == 0 else "FAIL"), flush=True)
    dist.destroy_process_group()
    raise SystemExit(0 if verdict.item() == 0 else 1)


if __name__ == "__main__":
    main()
