"""DTensor: zgate's ops on DTensors of one placement (Shard on the heads or the sequence dim,
Replicate) run on the local shards with no communication and return DTensors of that
placement, equal bit for bit to the undistributed call; inputs of mixed placements are
redistributed by DTensor first. Two CPU processes on gloo, in a subprocess bounded in time."""
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")


def _worker(rank, port):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        _check(rank)
    finally:
        dist.destroy_process_group()
    # After a clean run, leave without the process's C++ static destructors: PyTorch's
    # teardown of a gloo process aborts now and then ("terminate called without an active
    # exception", with no Python frame), with zgate or without it (4 of 40 runs of two ranks
    # doing DTensor ops with torch alone; 0 of 40 leaving this way).
    sys.stdout.flush()
    os._exit(0)


def _check(rank):
    import zgate
    import zgate.torch as zt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (2,))
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(2, 6, 4, 16, generator=g) for _ in range(3)]
    want_dz, want_dos = zgate.bwd(*full)
    want_out = zgate.fwd(full[2], full[1])
    for placements in ([Shard(2)], [Shard(1)], [Replicate()]):   # heads, sequence
        dout, z, o = (distribute_tensor(t, mesh, placements) for t in full)
        given = [torch.empty_like(dout), torch.empty_like(dout)]
        comm = CommDebugMode()
        with comm:
            dz, dos = zgate.bwd(dout, z, o)
            out = zgate.fwd(o, z)
            rz, rs = zgate.bwd(dout, z, o, dz=given[0], dout_scaled=given[1])
            cz, cs = zt.compute_dzdo(dout, z, o)
        assert comm.get_total_counts() == 0, comm.get_comm_counts()
        for r in (dz, dos, out, cz, cs):
            assert isinstance(r, DTensor) and r.placements == tuple(placements), r
        assert rz is given[0] and rs is given[1]
        for got, want in ((dz, want_dz), (dos, want_dos), (out, want_out), (rz, want_dz),
                          (rs, want_dos), (cz, want_dz), (cs, want_dos)):
            assert torch.equal(got.full_tensor(), want)
    # mixed placements: z is redistributed to dout's
    dout, o = (distribute_tensor(t, mesh, [Shard(2)]) for t in (full[0], full[2]))
    z = distribute_tensor(full[1], mesh, [Shard(1)])
    dz, dos = zgate.bwd(dout, z, o)
    assert dz.placements == (Shard(2),) and torch.equal(dz.full_tensor(), want_dz)
    if rank == 0:
        print("dtensor checks passed")


def test_dtensor_two_processes_on_gloo():
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = subprocess.run([sys.executable, __file__, str(port)], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0 and "dtensor checks passed" in run.stdout, run.stderr[-4000:]


if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(int(sys.argv[1]),), nprocs=2, join=True)
