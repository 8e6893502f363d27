"""python -m zgate.acceptance: the comparison and the report on recorded runs, the NPU-only
timing parts on written files, and the CPU device end to end."""
import json
import os

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")
from zgate import acceptance as A  # noqa: E402
from zgate._mamba import import_upstream_dzdo  # noqa: E402
from zgate.acceptance import device as D  # noqa: E402
from zgate.acceptance import report as R  # noqa: E402


# --- recorded runs ----------------------------------------------------------------------------

def recorded(times, copy_us=None, bound=(), seed=7, names=None):
    names = names or ["case %d" % i for i in range(len(times))]
    rows = []
    for i, (n, t) in enumerate(zip(names, times)):
        c = (copy_us or [t / 2] * len(times))[i]
        rows.append({"case": n, "dtype": "bfloat16", "bytes": 10 ** 8, "error": None,
                     "launch_bound": i in bound, "ideal_us": 5.0 if i in bound else 50.0,
                     "precision_ok": True, "frac_copy": c / t,
                     "outputs": [{"ok": True, "max_bound_ratio": 0.5, "dtype": "bfloat16"}],
                     "kernel": {"median": t, "min": t, "max": t, "n": 1},
                     "wall": {"median": t}, "copy": {"median": c}})
    meta = {"seed": seed, "impl": "zgate", "device_name": "test", "versions": {"zgate": "x"},
            "quick": True, "timer": "recorded", "repeats": 1, "warmup": 0, "flush_mb": 1,
            "copy_gbps": 100.0, "baseline": "base.json", "golden": None, "f32_ulps": 4}
    return {"meta": meta, "cases": rows}


def verdict(run, base):
    cmp = R.compare(run, base)
    crits = R.criteria(run, cmp, None)
    return cmp, dict((k, ok) for k, ok, _ in crits), crits


def test_pass_on_recorded_runs():
    base = recorded([100.0, 200.0, 10.0])
    run = recorded([95.0, 230.0, 50.0], copy_us=[40.0, 100.0, 5.0], bound=(2,))
    cmp, ok, crits = verdict(run, base)
    s = cmp["summary"]
    assert s["n"] == 2 and s["n_launch_bound"] == 1     # the slow launch-bound case left out
    assert s["geomean"] == pytest.approx(((100 / 95) * (200 / 230)) ** 0.5)
    assert (s["min"], s["n_09"], s["n_10"]) == (pytest.approx(200 / 230), 1, 1)
    assert cmp["rows"]["case 0"]["bw_ratio"] == pytest.approx((40 / 95) / 0.5)
    assert ok["speed"] and ok["ref"] and ok["ran"]
    for lang in ("en", "zh-CN"):
        text = R.markdown(run, cmp, crits, lang)
        assert "**FAIL**" not in text and text.count("**PASS**") == 3
        assert "0.957" in text                          # the geomean, printed
    assert "launch-bound" in R.markdown(run, cmp, crits) and "启动受限" in R.markdown(
        run, cmp, crits, "zh-CN")


def test_fail_on_recorded_runs():
    base = recorded([100.0, 100.0, 100.0])
    cmp, ok, crits = verdict(recorded([100.0, 125.0, 130.0]), base)
    assert cmp["summary"]["geomean"] < 0.9 and not ok["speed"]
    assert "**FAIL**" in R.markdown(recorded([100.0, 125.0, 130.0]), cmp, crits)
    # too few cases above the line: no verdict, so no PASS
    assert not verdict(recorded([50.0, 50.0], bound=(1,)), recorded([100.0, 100.0]))[1]["speed"]
    # a baseline case without a time: not judged as a pass
    b = recorded([100.0, 100.0, 100.0])
    b["cases"][1]["error"] = "did not run"
    assert not verdict(recorded([90.0, 90.0, 90.0]), b)[1]["speed"]
    # a case that did not run here fails the run
    r = recorded([90.0, 90.0])
    r["cases"][0]["error"] = "TimingError: no kernel"
    assert not verdict(r, recorded([90.0, 90.0]))[1]["ran"]


def test_mismatch_is_refused_by_name():
    base = recorded([1.0, 1.0], names=["bwd a", "bwd b"])
    R.check_compatible({"seed": 7}, ["bwd a", "bwd b"], base, "base.json")
    with pytest.raises(R.Mismatch, match="seed 7, this run uses 8"):
        R.check_compatible({"seed": 8}, ["bwd a", "bwd b"], base, "base.json")
    with pytest.raises(R.Mismatch, match="only in base.json: bwd b; only in this run: fwd c"):
        R.check_compatible({"seed": 7}, ["bwd a", "fwd c"], base, "base.json")
    with pytest.raises(R.Mismatch, match="another order"):
        R.check_compatible({"seed": 7}, ["bwd b", "bwd a"], base, "base.json")


# --- the judge: zgate.cases.judge, the C policy ------------------------------------------------

def _steps(a, i, k):
    """a copy of float array a with element i moved k representable values away from zero."""
    b = a.copy()
    bits = b.reshape(-1).view(np.uint32 if b.dtype == np.float32 else np.uint16)
    bits[i] = int(bits[i]) + k          # sign and magnitude: more bits, farther from zero
    return b


def _fwd_case(rng, dtype):
    """o, z, the forward's float64 reference rounded to dtype (within half an ulp), the
    reference, and elements away from the root and from binade edges (|ref| in [1.25, 1.75)
    times a power of two), where the scale is |ref|."""
    import zgate
    o, z = ((rng.standard_normal((4, 64)) * 3).astype(dtype) for _ in range(2))
    ref = zgate.reference_fwd(o, z)
    out = ref.astype(dtype)
    m, r = np.abs(np.frexp(ref)[0]).reshape(-1), np.abs(ref.reshape(-1))
    return o, z, out, ref, np.flatnonzero((m >= 0.625) & (m < 0.875) & (r > 1e-3))


def test_judge_refuses_a_few_ulps_off(rng):
    import zgate
    from zgate.cases import judge
    o, z, out, ref, good = _fwd_case(rng, np.float32)
    i = int(good[0])
    assert judge("out", zgate.fwd(o, z), ref, None, z, o)["ok"]
    assert judge("out", _steps(out, i, 3), ref, None, z, o)["ok"]        # within 4 ulp
    st = judge("out", _steps(out, i, 6), ref, None, z, o)
    assert not st["ok"] and st["failures"] == 1 and st["first_fail"] == i
    assert 5 < st["ulps"] < 7 and st["max_bound_ratio"] > 1
    # the Triton kernel's bound, 64 ulp: the scale's input handed over times 16
    assert judge("out", _steps(out, i, 6), ref, None, z, o, 64)["ok"]
    assert judge("out", _steps(out, i, -60), ref, None, z, o, 64)["ok"]
    assert not judge("out", _steps(out, i, -70), ref, None, z, o, 64)["ok"]
    nan = out.copy()
    nan.reshape(-1)[i] = np.nan
    assert judge("out", nan, ref, None, z, o)["nan_mismatches"] == 1
    with pytest.raises(ValueError, match="4 times a power of two"):
        judge("out", out, ref, None, z, o, 6)


def test_judge_reports_the_requests_figures(rng):
    """check_tensor's max_scale_err and past_request (the request's 0.1% of the elementwise
    scale, floored at the output type's smallest normal) against the scale written out here
    in float64, on outputs moved 0, 0.04% or 0.2% of it off the reference; judge_case takes
    them over the policy's scale also where the Triton kernel's bound widens it."""
    import zgate
    from zgate import cases as C
    dout, z, o = ((rng.standard_normal((3, 50, 2, 8)) * 3).astype(np.float32) for _ in range(3))
    s = 1 / (1 + np.exp(-z.astype(np.float64)))
    d64, o64, z64 = (a.astype(np.float64) for a in (dout, o, z))
    scales = {"dz": np.abs(d64 * o64) * s * (1 + np.abs(z64) * (1 - s)),
              "dout_scaled": np.abs(d64 * z64) * s, "out": np.abs(o64 * z64) * s}
    refs = dict(zip(("dz", "dout_scaled"), zgate.reference_bwd(dout, z, o)),
                out=zgate.reference_fwd(o, z))
    for q, scale in scales.items():
        f = rng.choice([0, 4e-4, -4e-4, 2e-3, -2e-3], size=scale.shape)
        got = (refs[q] + f * scale).astype(np.float32)
        rel = np.abs(got - refs[q]) / np.maximum(scale, 2.0 ** -126)
        st = C.judge(q, got, refs[q], None if q == "out" else dout, z, o)
        assert st["past_request"] == np.count_nonzero(rel > 1e-3) == np.count_nonzero(
            np.abs(f) > 1e-3), q
        assert st["max_scale_err"] == pytest.approx(rel.max(), rel=1e-9)
    case = next(c for c in C.cases(True) if c.op == "bwd" and c.dtypes == ("float32",) * 5
                and c.layout == "dense")
    arrays = C.inputs(case, 5)
    refs = zgate.reference_bwd(*arrays)
    outs = [(r * (1 + 2e-3)).astype(np.float32) for r in refs]    # dout_scaled's |ref| is its scale
    figures = [[(x["request_max"], x["request_past"]) for x in C.judge_case(
        case, arrays, list(outs), ulps)] for ulps in (C.F32_ULPS, C.TRITON_F32_ULPS)]
    assert figures[0] == figures[1]
    assert figures[0][1][1] == np.count_nonzero(refs[1]) > 0
    assert 1e-3 < figures[0][1][0] < 2.01e-3


def test_judge_bfloat16_and_the_interpreters_truncation(rng):
    import zgate
    from zgate.cases import BF16, as_rounded_to_nearest, judge
    o, z, out, ref, good = _fwd_case(rng, BF16)
    i = int(good[0])
    assert judge("out", zgate.fwd(o, z), ref, None, z, o)["ok"]
    assert not judge("out", _steps(out, i, 2), ref, None, z, o)["ok"]    # 2 ulp: refused
    # truncation toward zero (what the interpreter stores) is judged as rounded to nearest
    trunc = (ref.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(BF16)
    assert judge("out", as_rounded_to_nearest(trunc, ref)[0], ref, None, z, o)["ok"]
    # ... which moves a value by one step at most: three steps toward zero stay refused
    off = _steps(out, i, -3)
    assert not judge("out", as_rounded_to_nearest(off, ref)[0], ref, None, z, o)["ok"]


# --- the NPU's timing parts -------------------------------------------------------------------

def write_csv(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    return str(path)


NEW = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
       "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num",
       "Mix Block Num", "HF32 Eligible", "Input Shapes"]
OLD = [c.replace("Block Num", "Block Dim") for c in NEW]


def csv_rows(names_us):
    return [[1, 0, 4294967295, i, 2, n, "KERNEL_AIVEC", "N/A", "AI_VECTOR_CORE", 1000 + 10 * i,
             us, 0.5, 40, 0, "NO", '"1,2"'] for i, (n, us) in enumerate(names_us)]


@pytest.mark.parametrize("header", [NEW, OLD], ids=["Block Num", "Block Dim"])
def test_kernel_details_both_spellings(tmp_path, header):
    seq = [("ZerosLike", 80.0), ("zgate_bwd_kernel", 12.5)] * 3
    p = write_csv(tmp_path / "kernel_details.csv", header, csv_rows(seq))
    rows = D.read_kernel_details(p)
    assert rows[1] == ("zgate_bwd_kernel", 12.5, 40)
    assert D.per_call([(n, us) for n, us, _ in rows], {"ZerosLike"}, 3) == [12.5] * 3


def test_kernel_details_columns_in_another_order_and_several_kernels(tmp_path):
    header = ["Extra", "Duration(us)", "Name", "Block Dim", "More"]
    seq = [("ZerosLike", 9.0), ("k1", 2.0), ("k2", 3.0), ("ZerosLike", 9.0), ("k1", 2.5),
           ("k2", 3.5)]
    p = write_csv(tmp_path / "k.csv", header, [["x", us, n, 8, "y"] for n, us in seq])
    rows = [(n, us) for n, us, _ in D.read_kernel_details(p)]
    assert D.per_call(rows, {"ZerosLike"}, 2) == [5.0, 6.0]
    with pytest.raises(D.TimingError, match="3 kernels for 2 calls"):
        D.per_call(rows[:-1], {"ZerosLike"}, 2)


def test_missing_kernel_is_an_error_never_zero(tmp_path):
    p = write_csv(tmp_path / "k.csv", NEW, csv_rows([("ZerosLike", 80.0)] * 2))
    rows = [(n, us) for n, us, _ in D.read_kernel_details(p)]
    with pytest.raises(D.TimingError, match="no kernel"):
        D.per_call(rows, {"ZerosLike"}, 2)
    with pytest.raises(D.TimingError, match="without a duration"):
        D.per_call([("k", 0.0)], set(), 1)
    p = write_csv(tmp_path / "bad.csv", ["Name", "Start Time(us)"], [["k", 1.0]])
    with pytest.raises(D.TimingError, match="no column Duration"):
        D.read_kernel_details(p)
    p = write_csv(tmp_path / "nan.csv", ["Name", "Duration(us)"], [["k", "N/A"]])
    with pytest.raises(D.TimingError, match="not a number"):
        D.read_kernel_details(p)


def test_do_bench_npu_adaptor():
    seen = {}

    def modern(funcs, warmup=5, active=30, clear_l2_cache=False, prof_dir=None,
               keep_res=False, target_kernel_name=None):
        seen.update(n=len(funcs), warmup=warmup, active=active, clear=clear_l2_cache,
                    prof_dir=prof_dir)
        return 0.0125                                  # milliseconds

    assert D.bench_npu(modern, lambda: None, 3, 7, "/d") == [pytest.approx(12.5)]
    assert seen == {"n": 1, "warmup": 3, "active": 7, "clear": True, "prof_dir": "/d"}
    assert D.bench_npu(lambda funcs, **k: [0.002], None, 1, 1, "/d") is None  # no clear_l2_cache

    def zero(funcs, warmup=5, active=30, clear_l2_cache=False, prof_dir=None):
        return [0.0]
    with pytest.raises(D.TimingError):
        D.bench_npu(zero, lambda: None, 1, 1, "/d")


# --- the CPU device end to end ----------------------------------------------------------------

FAST = ["--device", "cpu", "--quick", "--warmup", "1", "--repeats", "5", "--flush-mb", "4"]
SMALL = FAST + ["--filter", " f32 "]   # the quick list's small float32 cases


def test_interpreter_times_are_reported_not_judged():
    """A run timed under the Triton interpreter (a CPU stand-in), or compared with a baseline
    that was, goes ahead: its speed is reported, never judged, and the run's verdict rests on
    the other criteria."""
    for interp_run, interp_base in ((True, False), (False, True), (True, True)):
        run, base = recorded([300.0, 300.0]), recorded([100.0, 100.0])
        run["meta"]["interpreter"], base["meta"]["interpreter"] = interp_run, interp_base
        cmp, ok, crits = verdict(run, base)
        assert ok == {"ref": True, "speed": None, "ran": True}
        assert "Triton interpreter" in dict((k, f) for k, _, f in crits)["speed"]
        text = R.markdown(run, cmp, crits)
        assert "**FAIL**" not in text and "**not judged** (timed under the Triton" in text
        assert "**不判定**（在 Triton 解释器下计时" in R.markdown(run, cmp, crits, "zh-CN")
    run["meta"]["interpreter"] = base["meta"]["interpreter"] = False
    assert verdict(run, base)[1]["speed"] is False          # the same times, judged


def test_bad_arguments_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    out = tmp_path / "r.md"
    with pytest.raises(SystemExit) as e:
        A.main(["--device", "tpu"])
    assert e.value.code == 2
    assert A.main(SMALL + ["--baseline", str(tmp_path / "none.json"), "--output", str(out)]) == 2
    assert A.main(SMALL + ["--output", str(tmp_path / "no" / "r.md")]) == 2
    assert A.main(SMALL + ["--golden", str(tmp_path / "none.npz")]) == 2
    assert A.main(["--device", "cpu", "--impl", "upstream", "--op", "bwd"]) == 2
    assert A.main(SMALL + ["--repeats", "0"]) == 2
    assert A.main(SMALL + ["--filter", "no such case"]) == 2
    other = recorded([1.0], seed=20261203, names=["bwd 9x9x9x9 bfloat16 dense"])
    (tmp_path / "b.json").write_text(json.dumps(other))
    assert A.main(SMALL + ["--baseline", str(tmp_path / "b.json"), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "only in this run: bwd 2x3x4x1 f32 dense" in err
    # upstream's Triton kernel on CPU tensors needs the interpreter (or Triton itself)
    assert "only under TRITON_INTERPRET=1" in err or "Triton is not installed" in err
    assert not out.exists()


def test_golden_off_by_one_percent_fails(tmp_path):
    g, j = tmp_path / "g.npz", tmp_path / "r.json"
    assert A.main(SMALL + ["--save-golden", str(g), "--json", str(j)]) == 0
    first = json.loads(j.read_text())
    assert [c[:2] for c in first["criteria"]] == [["ref", True], ["ran", True]]
    assert A.main(SMALL + ["--golden", str(g)]) == 0         # the same outputs again
    gold = dict(np.load(g))
    key = "bwd 1x5x2x3 f32 zview|0"
    gold[key] = (gold[key].astype(np.float64) * 1.01).astype(np.float32)
    np.savez(tmp_path / "off.npz", **gold)
    out = tmp_path / "r.md"
    assert A.main(SMALL + ["--golden", str(tmp_path / "off.npz"), "--json", str(j),
                           "--output", str(out)]) == 1
    res = json.loads(j.read_text())
    bad = [r["case"] for r in res["cases"] if not r["precision_ok"]]
    assert bad == ["bwd 1x5x2x3 f32 zview"]
    assert dict((k, ok) for k, ok, _ in res["criteria"]) == {"ref": True, "golden": False,
                                                             "ran": True}
    assert "**FAIL** precision against the golden run" in out.read_text()


def test_golden_whose_maker_failed_a_case_is_refused(tmp_path, capsys):
    """A golden file records per case whether its outputs passed the float64 policy: a run
    given one that failed a case of it (or a file without the record) is refused, named."""
    g = tmp_path / "g.npz"
    assert A.main(SMALL + ["--save-golden", str(g)]) == 0
    gold = dict(np.load(g))
    assert gold["bwd 1x5x2x3 f32 zview|ok"] and "--impl zgate on" in str(gold["__maker__"])
    gold["bwd 1x5x2x3 f32 zview|ok"] = np.array(False)
    np.savez(tmp_path / "wrong.npz", **gold)
    assert A.main(SMALL + ["--golden", str(tmp_path / "wrong.npz")]) == 2
    assert A.main(SMALL + ["--filter", "2x3x4x1 f32", "--golden",
                           str(tmp_path / "wrong.npz")]) == 0      # that case left out
    np.savez(tmp_path / "old.npz", **{k: v for k, v in gold.items() if not k.endswith("|ok")})
    assert A.main(SMALL + ["--golden", str(tmp_path / "old.npz")]) == 2
    err = capsys.readouterr().err
    assert "cannot be the golden run" in err and "1 of this run's cases (bwd 1x5x2x3 f32 " \
        "zview)" in err and "does not record whether its outputs passed" in err


def test_precision_only_runs_the_whole_list_untimed(tmp_path, capsys):
    from zgate import cases as C
    j, md = tmp_path / "r.json", tmp_path / "r.md"
    assert A.main(["--device", "cpu", "--quick", "--precision-only", "--json", str(j),
                   "--output", str(md)]) == 0
    res = json.loads(j.read_text())
    names = [r["case"] for r in res["cases"]]
    assert names == [c.name for c in C.cases(quick=True)]
    for kind in (" mixed ", " inplace", " permuted", " 2x0x4x8 "):   # beyond the timed list
        assert any(kind in n + " " for n in names), kind
    assert all("kernel" not in r and "ideal_us" not in r for r in res["cases"])
    assert res["meta"]["copy_gbps"] is None
    assert [c[:2] for c in res["criteria"]] == [["ref", True], ["ran", True]]
    assert "| case | MB | precision (error / bound) | max ulps | past 0.1% |" in md.read_text()
    # the request's 0.1% per output dtype: float32 inside it, 16-bit rounding past it
    req = res["request"]
    assert set(req) == {"float32", "float16", "bfloat16"}
    assert 0 < req["float32"]["max"] < 1e-4 and req["float32"]["share"] == 0
    assert req["bfloat16"]["max"] > 1e-3 and 0.05 < req["bfloat16"]["share"] < 0.9
    assert "## The request's 0.1%, per output dtype" in md.read_text()
    assert "| float32 | %d | 0.1%% of the scale: **PASS** |" % req["float32"]["outputs"] in \
        md.read_text()
    assert A.main(SMALL + ["--precision-only", "--save-baseline", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert "--precision-only times nothing" in err


def test_outputs_are_made_in_the_layouts_views():
    """zgate_impl hands bwd and fwd their outputs in the views of the case's layout (permuted:
    dz nheads_outer, dout_scaled rows_padded_1, the forward's out dz's), the padding NaN, and
    judges what they wrote there; a write into the padding fails the case."""
    import zgate
    from zgate import cases as C
    from zgate.acceptance import run as U
    dev, seen = D.Cpu(1), {}

    class Recording:
        scribble = False

        @classmethod
        def bwd(cls, dout, z, o, dz, dout_scaled, **kw):
            seen["bwd"] = [(a.strides, np.isnan(a.base).sum()) for a in (dz, dout_scaled)]
            r = zgate.bwd(dout, z, o, dz=dz, dout_scaled=dout_scaled, **kw)
            if cls.scribble:        # one element of dout_scaled's padding
                pad = C.in_view(np.zeros(dz.shape, bool), views[4], fill=True).base
                dout_scaled.base[np.flatnonzero(pad)[0]] = 0
            return r

        @staticmethod
        def fwd(o, z, out, **kw):
            seen["fwd"] = [(out.strides, np.isnan(out.base).sum())]
            return zgate.fwd(o, z, out=out, **kw)

    views = C.layout_views("permuted")[1]
    assert [v.order for v in views[3:]] == [(2, 3, 0, 1), (0, 2, 1, 3)] and views[4].extra
    prepare = U.zgate_impl(Recording)
    for op, slots in (("bwd", (3, 4)), ("fwd", (3,))):
        case = next(c for c in C.cases() if c.name == op + " 2x7x3x17 f32 permuted")
        row = U.check_case(dev, prepare, case, 1, C.F32_ULPS)[0]
        assert row["error"] is None and row["precision_ok"], row
        for (strides, nans), k in zip(seen[op], slots):
            want, _, n = C.view_strides(views[k], case.shape)
            assert strides == tuple(4 * s for s in want) and nans == n
    Recording.scribble = True
    case = next(c for c in C.cases() if c.name == "bwd 2x7x3x17 f32 permuted")
    row = U.check_case(dev, prepare, case, 1, C.F32_ULPS)[0]
    assert "dout_scaled: 1 elements of its buffer outside its view were written" in row["error"]


def _two_threads_speedup():
    """How much faster two threads are than one on this machine right now, timed as the run
    times them (the device's wall time, cache flushed)."""
    import zgate
    from zgate import cases as C
    from zgate.acceptance import run as U
    dev = D.Cpu(4)
    case = next(c for c in U.case_list(True) if c.shape == (2, 2048, 24, 64))
    ins = C.inputs(case, 1)
    med = {n: np.median(dev.wall_us(U.zgate_impl(zgate, n)(dev, case, ins)[0], 1, 9))
           for n in (1, 2)}
    return float(med[1] / med[2])


BIG = FAST + ["--filter", "bwd 2x2048x24x64", "--repeats", "9"]   # two cases above the line


@pytest.fixture(scope="module")
def big_baseline(tmp_path_factory):
    b = tmp_path_factory.mktemp("base") / "b.json"
    assert A.main(BIG + ["--threads", "2", "--save-baseline", str(b)]) == 0
    return b


def test_fewer_threads_than_the_baseline_fails(tmp_path, big_baseline):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: fewer threads cannot be slower")
    def loaded(when, gain):
        if gain < 1.6:     # other work on the cores: the comparison would measure that
            pytest.skip("two threads were only %.2fx one thread %s the runs (a loaded "
                        "machine)" % (gain, when))
    loaded("before", _two_threads_speedup())
    j, md = tmp_path / "r.json", tmp_path / "r.md"
    rc = A.main(BIG + ["--threads", "1", "--baseline", str(big_baseline), "--json", str(j),
                       "--output", str(md), "--lang", "zh-CN"])
    loaded("after", _two_threads_speedup())
    assert rc == 1
    res = json.loads(j.read_text())
    s = res["comparison"]["summary"]
    assert s["n"] == 2 and s["geomean"] < 0.9
    assert dict((k, ok) for k, ok, _ in res["criteria"]) == {"ref": True, "speed": False,
                                                             "ran": True}
    assert "**FAIL** 性能" in md.read_text(encoding="utf-8")


def test_missing_backend_or_upstream_is_named(tmp_path, capsys):
    up = ["--device", "cuda", "--impl", "upstream", "--quick", "--upstream-path", str(tmp_path)]
    assert A.main(up + ["--op", "bwd"]) == 2         # no GPU, no Triton or no upstream here
    assert A.main(up) == 2                           # upstream without --op bwd
    err = capsys.readouterr().err
    assert "only the backward kernel: add --op bwd" in err
    assert any(why in err for why in ("needs PyTorch", "no CUDA device", "Triton",
                                      "holds neither"))
    with pytest.raises(ImportError, match="holds neither mamba3/mamba3_siso_bwd.py nor mamba_ssm"):
        import_upstream_dzdo(str(tmp_path))


def test_slower_candidate_fails_on_any_machine(tmp_path, big_baseline):
    """The scalar kernels on one thread against the default ones on two: about 10x slower,
    which no load on the machine hides (ZGATE_CPU_ISA is read once per process)."""
    import subprocess
    import sys
    j = tmp_path / "r.json"
    env = dict(os.environ, ZGATE_CPU_ISA="scalar")
    p = subprocess.run([sys.executable, "-m", "zgate.acceptance"] + BIG + [
        "--threads", "1", "--warmup", "0", "--repeats", "3", "--baseline", str(big_baseline),
        "--json", str(j)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    res = json.loads(j.read_text())
    assert res["comparison"]["summary"]["geomean"] < 0.5
    assert dict((k, ok) for k, ok, _ in res["criteria"]) == {"ref": True, "speed": False,
                                                             "ran": True}
    assert "FAIL speed" in p.stdout


FUNCTIONS = '''
import torch


def formula(do, z, o, chunk_size=64):
    d, zz, oo = (t.double() for t in (do, z, o))
    s = torch.sigmoid(zz)
    return ((d * oo * s * (1 + zz * torch.sigmoid(-zz))).to(do.dtype),
            (d * s * zz).to(do.dtype))


def one_percent_off(do, z, o, chunk_size=64):
    dz, dos = formula(do, z, o)
    return dz * 1.01, dos
'''


def test_any_function_of_upstreams_signature(tmp_path, monkeypatch, capsys):
    """--impl MODULE:FUNCTION judges a function (do, z, o) -> (dz, do_scaled) on the backward
    cases it can take, as zgate's own; a wrong one fails, a missing one is refused."""
    pytest.importorskip("torch")
    (tmp_path / "dzdo_candidates.py").write_text(FUNCTIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    j = tmp_path / "r.json"
    base = ["--device", "cpu", "--quick", "--precision-only", "--op", "bwd", "--json", str(j)]
    assert A.main(base + ["--impl", "dzdo_candidates:formula"]) == 0
    res = json.loads(j.read_text())
    names = [r["case"] for r in res["cases"]]
    assert len(names) >= 10 and all(r["precision_ok"] for r in res["cases"])
    assert not any(" mixed " in n or "bf16-to-f32" in n or "inplace" in n for n in names)
    assert "dtype other than do's" in res["meta"]["not_run"][0]
    assert A.main(base + ["--impl", "dzdo_candidates:one_percent_off"]) == 1
    res = json.loads(j.read_text())
    assert 9e-3 < res["request"]["float32"]["max"] < 1.1e-2     # dz 1% off: past 0.1%
    assert res["request"]["float32"]["share"] > 0.4
    assert A.main(base + ["--impl", "dzdo_candidates:absent"]) == 2
    assert A.main(["--device", "cpu", "--quick", "--precision-only",
                   "--impl", "dzdo_candidates:formula"]) == 2          # no --op bwd
    assert A.main(base + ["--impl", "not a function"]) == 2
    err = capsys.readouterr().err
    assert "AttributeError" in err and "add --op bwd" in err
    assert "is not zgate, triton, upstream or MODULE:FUNCTION" in err
    # timed on the CPU by the host's clock (no baseline: no speed criterion)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert A.main(base[:3] + base[4:] + ["--warmup", "0", "--repeats", "1",
                                         "--impl", "dzdo_candidates:formula"]) == 0
    res = json.loads(j.read_text())
    assert all(r["kernel"]["median"] > 0 for r in res["cases"]) and not res["meta"]["interpreter"]
    assert [c[0] for c in res["criteria"]] == ["ref", "ran"]
