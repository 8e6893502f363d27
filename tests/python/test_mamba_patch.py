"""zgate.torch.use_in_mamba_ssm on a synthetic mamba_ssm written into a temporary folder, with
upstream's import pattern: compute_dzdo defined in one module, imported by name in another
(as mamba3_siso_combined does), called through the module in a third, and imported under
another name by a module elsewhere in the package that nothing has imported yet."""
import importlib
import logging
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("PyTorch %s predates torch.library.custom_op (2.4)" % torch.__version__,
                allow_module_level=True)

import zgate.torch as zt  # noqa: E402
from zgate import _mamba  # noqa: E402
from tt_util import np_of  # noqa: E402
from zg_oracle import check_bwd  # noqa: E402

BWD = "mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd"
COMBINED = "mamba_ssm.ops.triton.mamba3.mamba3_siso_combined"
BY_MODULE = "mamba_ssm.ops.triton.mamba3.by_module"
ELSEWHERE = "mamba_ssm.modules.elsewhere"

DEFINITION = '''
import torch
CALLS = []

def compute_dzdo(do, z, o, chunk_size=64):
    CALLS.append(chunk_size)
    # allocated as upstream's: a last stride other than 1 made contiguous, then empty_like
    if do.stride(-1) != 1:
        do = do.contiguous()
    if z.stride(-1) != 1:
        z = z.contiguous()
    dz, do_scaled = torch.empty_like(z, dtype=do.dtype), torch.empty_like(do, dtype=do.dtype)
    s = torch.sigmoid(z.float())
    dz.copy_(do.float() * o.float() * s * (1 + z.float() * (1 - s)))
    do_scaled.copy_(do.float() * s * z.float())
    return dz, do_scaled
'''

PACKAGE = {
    "__init__.py": "",
    "ops/__init__.py": "",
    "ops/triton/__init__.py": "",
    "ops/triton/mamba3/__init__.py": "",
    "ops/triton/mamba3/mamba3_siso_bwd.py": DEFINITION,
    "ops/triton/mamba3/mamba3_siso_combined.py": '''
        from mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd import compute_dzdo

        def backward(do, z, o):
            return compute_dzdo(do, z, o, chunk_size=32)
    ''',
    "ops/triton/mamba3/by_module.py": '''
        from mamba_ssm.ops.triton.mamba3 import mamba3_siso_bwd

        def backward(do, z, o):
            return mamba3_siso_bwd.compute_dzdo(do, z, o)
    ''',
    "modules/__init__.py": "",
    "modules/elsewhere.py": '''
        from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import compute_dzdo as gate_bwd

        def backward(do, z, o):
            return gate_bwd(do, z, o)
    ''',
    # Mentions the name but needs a package that is not there: reported, not fatal.
    "ops/cute/__init__.py": "",
    "ops/cute/needs_cutlass.py": "import zgate_test_no_such_module  # uses compute_dzdo\n",
    # Does not mention it: must not be imported at all.
    "models/__init__.py": "",
    "models/heavy.py": "raise RuntimeError('imported although it never names the gate')\n",
}


@pytest.fixture
def make_mamba(tmp_path, mamba_ssm_sandbox):
    """Writes a mamba_ssm package (PACKAGE with `changes`: path -> text, None deletes) into
    tmp_path and puts it first on sys.path."""
    def make(changes=None):
        files = dict(PACKAGE, **(changes or {}))
        for rel, text in files.items():
            if text is None:
                continue
            path = tmp_path / "mamba_ssm" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        sys.path.insert(0, str(tmp_path))
        importlib.invalidate_caches()
        return tmp_path / "mamba_ssm"
    return make


def tensors(shape=(2, 33, 3, 80)):
    """(do, z, o) with z a view into a wider projection, as Mamba-3 passes it."""
    g = torch.Generator().manual_seed(7)
    do, o = (torch.randn(shape, generator=g) * 3 for _ in range(2))
    proj = torch.randn(shape[:2] + (2 * shape[2] * shape[3] + 8,), generator=g) * 3
    z = proj.bfloat16()[..., :shape[2] * shape[3]].unflatten(-1, shape[2:])
    assert not z.is_contiguous()
    return do.bfloat16(), z, o.float()


def assert_formula(do, z, o, result):
    dz, dos = result
    assert dz.dtype == do.dtype and dos.dtype == do.dtype
    check_bwd(*(np_of(t) for t in (do, z, o, dz, dos)))


def sites():
    return (sys.modules[BWD].compute_dzdo, sys.modules[COMBINED].compute_dzdo,
            sys.modules[ELSEWHERE].gate_bwd)


def call_all():
    """One call through each way upstream code reaches the function."""
    args = tensors()
    for mod in (COMBINED, BY_MODULE, ELSEWHERE):
        assert_formula(*args, importlib.import_module(mod).backward(*args))


def test_replaces_every_site_then_undo_restores_them(make_mamba):
    make_mamba()
    importlib.import_module(COMBINED)           # imported before the patch, as in a script
    original = sys.modules[BWD].compute_dzdo
    h = zt.use_in_mamba_ssm()
    assert h.replaced == [BWD + ".compute_dzdo", ELSEWHERE + ".gate_bwd",
                          COMBINED + ".compute_dzdo"]          # the definition first
    assert [m for m, _ in h.skipped] == ["mamba_ssm.ops.cute.needs_cutlass"]
    assert "zgate_test_no_such_module" in h.skipped[0][1]
    assert "mamba_ssm.models.heavy" not in sys.modules
    assert h.original is original and h.function is zt.compute_dzdo
    assert all(f is not original for f in sites())
    call_all()
    assert h.calls == 3 and sys.modules[BWD].CALLS == []    # zgate ran, the original did not
    h.undo()
    assert all(f is original for f in sites()) and not h.active
    call_all()
    assert h.calls == 3 and sys.modules[BWD].CALLS == [32, 64, 64]
    h.undo()                                    # a second undo changes nothing
    assert all(f is original for f in sites())


def test_patched_sites_allocate_as_the_original(make_mamba):
    """Through use_in_mamba_ssm, mixed dtypes and z a projection's view or permuted: dz and
    do_scaled have the dtypes and strides the original gives, and its values."""
    make_mamba()
    mod = importlib.import_module(COMBINED)
    do, z, o = tensors()
    cases = [(do.float(), z, o),                                          # f32 do, bf16 z view
             (do.half(), z.float().transpose(1, 2).contiguous().transpose(1, 2), o),
             (do.transpose(2, 3).contiguous().transpose(2, 3), z.half(), o.bfloat16())]
    for args in cases:
        want = mod.backward(*args)
        with zt.use_in_mamba_ssm() as h:
            got = mod.backward(*args)
        assert h.calls == 1
        for g, w in zip(got, want):
            assert (g.dtype, g.stride()) == (w.dtype, w.stride())
            torch.testing.assert_close(g.float(), w.float(), rtol=1e-2, atol=1e-2)


def test_context_manager_restores_on_error(make_mamba):
    make_mamba()
    with pytest.raises(KeyError):
        with zt.use_in_mamba_ssm() as h:
            original = h.original
            call_all()
            assert h.calls == 3
            raise KeyError("inside")
    assert all(f is original for f in sites()) and _mamba._installed == {}


def test_double_install_nests_and_undo_in_any_order(make_mamba):
    make_mamba()
    outer = zt.use_in_mamba_ssm()
    inner = zt.use_in_mamba_ssm()
    assert inner.replaced == outer.replaced and inner.original is outer.original
    call_all()
    assert (outer.calls, inner.calls) == (0, 3)   # the newest active handle takes the calls
    inner.undo()
    call_all()
    assert (outer.calls, inner.calls) == (3, 3)
    again = zt.use_in_mamba_ssm()
    outer.undo()                                  # out of order: `again` stays in force
    call_all()
    assert (outer.calls, again.calls) == (3, 3) and sys.modules[BWD].CALLS == []
    again.undo()
    assert all(f is outer.original for f in sites())


def test_module_imported_while_patched_is_restored(make_mamba):
    root = make_mamba()
    with zt.use_in_mamba_ssm() as h:
        (root / "late.py").write_text("from mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd "
                                      "import compute_dzdo\n")
        importlib.invalidate_caches()
        late = importlib.import_module("mamba_ssm.late")
        assert late.compute_dzdo is sys.modules[COMBINED].compute_dzdo   # the patched one
        late.compute_dzdo(*tensors())
        assert h.calls == 1
    assert late.compute_dzdo is h.original


def test_replacement_and_logging(make_mamba, caplog):
    make_mamba()
    seen = []

    def spy(do, z, o, chunk_size=64):
        seen.append(chunk_size)
        return zt.compute_dzdo(do, z, o, chunk_size)

    with caplog.at_level(logging.INFO, logger="zgate"):
        with zt.use_in_mamba_ssm(replacement=spy) as h:
            call_all()
    assert seen == [32, 64, 64] and h.calls == 3
    text = caplog.text
    assert "replaced by" in text and COMBINED + ".compute_dzdo" in text
    assert "needs_cutlass" in text and "restored" in text


def test_module_object_and_its_package_name(make_mamba):
    make_mamba({"ops/triton/mamba3/mamba3_siso_combined.py": None,
                  "ops/triton/mamba3/by_module.py": None, "modules/elsewhere.py": None,
                  "ops/cute/needs_cutlass.py": None})
    mod = importlib.import_module(BWD)
    user = type(sys)("user_script")             # code outside mamba_ssm is left alone
    user.compute_dzdo = mod.compute_dzdo
    with pytest.warns(UserWarning, match="only where it is defined"):
        h = zt.use_in_mamba_ssm(mod)
    assert h.replaced == [BWD + ".compute_dzdo"] and user.compute_dzdo is h.original
    assert_formula(*tensors(), mod.compute_dzdo(*tensors()))
    assert h.calls == 1
    h.undo()


def test_no_warning_when_an_importer_exists(make_mamba):
    make_mamba()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zt.use_in_mamba_ssm().undo()


def test_package_init_that_fails(make_mamba):
    make_mamba({"__init__.py": "raise ImportError(\"No module named 'selective_scan_cuda'\", "
                                 "name='selective_scan_cuda')\n"})
    with pytest.raises(ImportError, match="selective_scan_cuda.*skip_package_init=True") as ei:
        zt.use_in_mamba_ssm()
    assert "install selective_scan_cuda" in str(ei.value)
    with zt.use_in_mamba_ssm(skip_package_init=True) as h:
        assert len(h.replaced) == 3
        call_all()
        assert h.calls == 3
    assert not hasattr(sys.modules["mamba_ssm"], "__version__")   # registered, not executed


def test_absent_package():
    with pytest.raises(ImportError, match="zgate_no_such_pkg is not installed.*pip install "
                                          "mamba-ssm") as ei:
        zt.use_in_mamba_ssm("zgate_no_such_pkg.ops.triton.mamba3.mamba3_siso_bwd")
    assert ei.value.name == "zgate_no_such_pkg"
    if importlib.util.find_spec("mamba_ssm") is None:
        with pytest.raises(ImportError, match="mamba_ssm is not installed"):
            zt.use_in_mamba_ssm()
    assert "zgate_no_such_pkg" not in sys.modules


def test_package_without_the_function(make_mamba):
    make_mamba({"ops/triton/mamba3/mamba3_siso_bwd.py": "def compute_dqkv():\n    pass\n"})
    with pytest.raises(ImportError, match="has no function compute_dzdo.*2.3.2"):
        zt.use_in_mamba_ssm()
    assert _mamba._installed == {}


def test_package_without_mamba3(make_mamba):
    root = make_mamba()
    for f in sorted((root / "ops" / "triton" / "mamba3").iterdir(), reverse=True):
        f.unlink()
    (root / "ops" / "triton" / "mamba3").rmdir()
    importlib.invalidate_caches()
    with pytest.raises(ImportError, match="has no mamba_ssm.ops.triton.mamba3: Mamba-3 needs"):
        zt.use_in_mamba_ssm(skip_package_init=True)
    assert "mamba_ssm" not in sys.modules       # the bare package registered for it is gone
