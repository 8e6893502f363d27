"""tests/mamba/mamba_layer_check.py on the CPU, on a stand-in mamba checkout written into a
temporary folder (upstream's code is never in this repository): a tiny Mamba3 module whose gate
backward calls compute_dzdo, imported by name as upstream does, and a float32 reference of its
scan where upstream's test file keeps mamba3_siso_fwd_ref. The real run needs a GPU
(scripts/gpu-mamba.sh); this keeps the script's plumbing and verdicts from rotting."""
import json
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("PyTorch %s predates torch.library.custom_op (2.4)" % torch.__version__,
                allow_module_level=True)

MAMBA_TESTS = os.path.join(os.path.dirname(__file__), "..", "mamba")
sys.path.insert(0, MAMBA_TESTS)
import mamba_layer_check  # noqa: E402

# upstream's compute_dzdo, made 1% off in dz so that the gate check has something to find
DEFINITION = '''
import os
import torch

def compute_dzdo(do, z, o, chunk_size=64):
    if os.environ.get("STANDIN_UPSTREAM_DIES"):  # as upstream's kernel at headdim 96 on the GPU
        os._exit(134)
    s = torch.sigmoid(z.float())
    dz = do.float() * o.float() * s * (1 + z.float() * (1 - s)) * 1.01
    return dz.to(do.dtype), (do.float() * s * z.float()).to(do.dtype)
'''

COMBINED = '''
import torch
from mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd import compute_dzdo


class _Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o, z):
        ctx.save_for_backward(o, z)
        return (o.float() * torch.nn.functional.silu(z.float())).to(o.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        o, z = ctx.saved_tensors
        dz, do_scaled = compute_dzdo(grad_out, z, o, chunk_size=64)
        return do_scaled, dz


def mamba3_siso_combined(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None,
                         Input_States=None, chunk_size=64, return_final_states=False,
                         cu_seqlens=None):
    o = (V.float() * D[:, None] + DT.float().unsqueeze(-1)).to(V.dtype)
    return _Gate.apply(o, Z)
'''

MODULE = '''
import torch
import torch.nn as nn
from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined


class Mamba3(nn.Module):
    def __init__(self, d_model, d_state=128, expand=2, headdim=64, chunk_size=64,
                 device=None, dtype=None, **kwargs):
        super().__init__()
        self.d_inner, self.headdim = expand * d_model, headdim
        self.nheads, self.chunk_size = self.d_inner // headdim, chunk_size
        self.is_mimo = self.is_outproj_norm = False
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + self.nheads, bias=False,
                                 device=device, dtype=dtype)
        self.D = nn.Parameter(torch.ones(self.nheads, device=device))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False, device=device, dtype=dtype)

    def forward(self, u):
        z, x, dt = torch.split(self.in_proj(u), [self.d_inner, self.d_inner, self.nheads], -1)
        heads = (self.nheads, self.headdim)
        y = mamba3_siso_combined(Q=x, K=x, V=x.unflatten(-1, heads), ADT=dt, DT=dt, Trap=dt,
                                 Q_bias=self.D, K_bias=self.D, Angles=dt, D=self.D,
                                 Z=z.unflatten(-1, heads), chunk_size=self.chunk_size,
                                 Input_States=None, return_final_states=False, cu_seqlens=None)
        return self.out_proj(y.flatten(-2).to(u.dtype))
'''

REFERENCE = '''
import torch


def mamba3_siso_fwd_ref(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None,
                        Initial_States=None, chunk_size=64, dtype=torch.float32,
                        cu_seqlens=None):
    o = V.to(dtype) * D[:, None] + DT.to(dtype).unsqueeze(-1)
    return o * Z.to(dtype) * torch.sigmoid(Z.to(dtype)), None
'''


@pytest.fixture
def standin(tmp_path, mamba_ssm_sandbox):
    files = {
        "mamba_ssm/__init__.py": "raise ImportError(\"No module named 'selective_scan_cuda'\")\n",
        "mamba_ssm/ops/__init__.py": "", "mamba_ssm/ops/triton/__init__.py": "",
        "mamba_ssm/ops/triton/mamba3/__init__.py": "",
        "mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py": DEFINITION,
        "mamba_ssm/ops/triton/mamba3/mamba3_siso_combined.py": COMBINED,
        "mamba_ssm/modules/__init__.py": "", "mamba_ssm/modules/mamba3.py": MODULE,
        "tests/ops/triton/test_mamba3_siso.py": REFERENCE,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return tmp_path


ARGS = ["--device", "cpu", "--batch", "1", "--seqlen", "24", "--nheads", "2", "--rep", "2"]


def test_in_process_rows_and_verdicts(standin, tmp_path, capsys):
    out = tmp_path / "layer.json"
    rc = mamba_layer_check.main(["--mamba", str(standin), "--headdims", "8,12", "--in-process",
                                 "--json", str(out)] + ARGS)
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = json.load(open(out))["rows"]
    assert [r["headdim"] for r in rows] == [8, 12] and all(r["ok"] for r in rows)
    for r in rows:
        assert r["zgate_calls"] == 1 and r["replaced"][1].endswith("combined.compute_dzdo")
        assert r["gate"]["upstream"]["dz"]["off_1ulp"] > 0          # the 1% error is seen
        assert r["gate"]["zgate"]["dz"]["out_of_tolerance"] == 0
        assert r["gate"]["upstream"]["do_scaled"]["off_1ulp"] == 0
        assert r["gate"]["z_strides"][-1] == 1 and r["gate"]["z_strides"][1] > 2 * r["headdim"]
        assert r["forward"]["zgate_vs_upstream_max_diff"] == 0      # the gate is backward only
        assert r["grads"]["in_proj.weight"]["ratio"] < 1            # zgate nearer the reference
        assert set(r["grads"]) == {"input", "in_proj.weight", "D", "out_proj.weight"}
        assert r["time"]["zgate"]["backward_ms"] > r["time"]["zgate"]["gate_ms"] > 0
    assert "summary:" in text and "worst gradient ratio" in text


def test_flags_a_gradient_further_from_the_reference(standin):
    row = {"zgate_calls": 1, "gate": {"zgate": {"dz": {"out_of_tolerance": 0},
                                                "do_scaled": {"out_of_tolerance": 3}}},
           "grads": {"D": {"ratio": 1.2, "zgate_vs_ref": 0.12, "upstream_vs_ref": 0.1},
                     "input": {"ratio": 1.0, "zgate_vs_ref": 0.1, "upstream_vs_ref": 0.1}}}
    found = mamba_layer_check.problems(row)
    assert len(found) == 2 and "3 do_scaled" in found[0] and found[1].startswith("d(D)")
    row["zgate_calls"] = 0
    assert "ran 0 times" in mamba_layer_check.problems(row)[0]


def test_a_headdim_in_a_process_of_its_own(standin, tmp_path, capfd):
    argv = ["--mamba", str(standin), "--headdims", "8,12", "--json", str(tmp_path / "x")] + ARGS
    row = mamba_layer_check.child(argv, 12)
    assert row["headdim"] == 12 and row["ok"] and not (tmp_path / "x").exists()
    out = capfd.readouterr().out
    assert "headdim 12 (d_model 12)" in out and "summary:" not in out


def test_zgate_only_judges_against_the_reference_alone(standin, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STANDIN_UPSTREAM_DIES", "1")   # upstream's function must never run
    out = tmp_path / "layer.json"
    rc = mamba_layer_check.main(["--mamba", str(standin), "--headdims", "8", "--zgate-only",
                                 "--json", str(out)] + ARGS)
    text = capsys.readouterr().out
    assert rc == 0, text
    row = json.load(open(out))["rows"][0]
    assert row["zgate_only"] and row["ok"] and row["zgate_calls"] == 1
    assert set(row["gate"]) == {"z_strides", "first_call_ms", "zgate"}
    assert set(row["time"]) == {"zgate"} and row["time"]["zgate"]["gate_ms"] > 0
    for c in row["grads"].values():
        assert set(c) == {"numel", "zgate_vs_ref"} and c["zgate_vs_ref"] < 0.05
    assert "with zgate only" in text and "upstream's compute_dzdo not run" in text


def test_a_headdim_whose_upstream_run_dies_runs_again_with_zgate_only(standin, tmp_path,
                                                                     monkeypatch, capfd):
    monkeypatch.setenv("STANDIN_UPSTREAM_DIES", "1")
    out = tmp_path / "layer.json"
    rc = mamba_layer_check.main(["--mamba", str(standin), "--headdims", "8,12", "--json",
                                 str(out)] + ARGS)
    text = capfd.readouterr().out
    assert rc == 2, text                                 # a death is never a pass
    result = json.load(open(out))
    assert [r["headdim"] for r in result["rows"]] == [8, 12]
    assert all(r["zgate_only"] and r["ok"] for r in result["rows"])
    assert result["died"] == [{"headdim": 8, "zgate_only": False},
                              {"headdim": 12, "zgate_only": False}]
    assert "headdim   8: its process died with upstream's compute_dzdo in" in text
    assert "again with zgate's compute_dzdo only" in text
