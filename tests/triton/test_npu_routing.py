"""NPU tensors reach zgate.triton from zgate.bwd / zgate.fwd, and a missing toolchain is named.
No NPU here: a child process names PyTorch's private-use device "npu" (as torch_npu does) and
uses a tensor subclass that reports that device."""
import os
import subprocess
import sys
import textwrap


CHILD = textwrap.dedent("""
    import sys
    import torch
    torch.utils.rename_privateuse1_backend("npu")

    class FakeNpu(torch.Tensor):
        @property
        def device(self):
            return torch.device("npu", 0)

    x = torch.randn(1, 2, 3, 4).as_subclass(FakeNpu)
    import zgate, zgate.triton as zt
    from triton.backends import backends

    # 1. the toolchain is missing: the error names what to install, nothing is written
    out = torch.full((1, 2, 3, 4), 7.0).as_subclass(FakeNpu)
    for call in (lambda: zgate.bwd(x, x, x, dz=out), lambda: zgate.fwd(x, x, out=out)):
        try:
            call()
            sys.exit("no error")
        except zgate.Error as e:
            assert e.status == zgate.Status.ERR_DEVICE_UNSUPPORTED, e
            assert "triton-ascend" in str(e), e
    assert bool((torch.Tensor(out) == 7.0).all())
    backends.setdefault("ascend", None)          # triton-ascend present, torch_npu absent
    try:
        zgate.bwd(x, x, x)
        sys.exit("no error")
    except zgate.Error as e:
        assert "torch_npu" in str(e), e

    # 2. routing: every argument reaches zgate.triton unchanged
    seen = []
    zt.bwd = lambda *a, **k: seen.append(("bwd", a, k)) or ("dz", "dos")
    zt.fwd = lambda *a, **k: seen.append(("fwd", a, k)) or "out"
    assert zgate.bwd(x, x, x, dz=out, inplace=True) == ("dz", "dos")
    assert zgate.fwd(x, x, out=out) == "out"
    assert seen[0] == ("bwd", (x, x, x), {"dz": out, "dout_scaled": None, "inplace": True})
    assert seen[1] == ("fwd", (x, x), {"out": out})
    print("routing ok")
""")


def test_npu_tensors_route_to_triton():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("TRITON_INTERPRET", None)
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and "routing ok" in r.stdout, r.stdout + r.stderr
