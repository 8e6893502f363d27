"""cases.def's layouts as data: zgate.cases.view_strides follows the rule cases.def states
(as zgate_case_strides in check/zgate_cases.h), and every case's inputs lie in their
tensors' views, the permuted layout's z with a strided headdim."""
import numpy as np

from zgate import cases as C


def test_view_rule():
    _, _, layouts = C._read_case_file()
    views = {v for _, vs in layouts.values() for v in vs}
    shape = (2, 3, 4, 5)
    proj = layouts["zview"][1][1]
    assert C.view_strides(proj, shape) == ((3 * 72, 72, 5, 1), 20, 20 + 2 * 3 * 72)
    padded = layouts["permuted"][1][0]                      # dout (B, H, L, D+3)
    assert C.view_strides(padded, shape) == ((96, 8, 24, 1), 0, 192)
    assert C.view_strides(layouts["permuted"][1][1], shape)[0] == (60, 20, 1, 4)
    for v in views:                                         # inside its buffer, no overlap
        st, off, n = C.view_strides(v, shape)
        assert off + sum((k - 1) * s for k, s in zip(shape, st)) < n
        idx = {off + np.dot(i, st) for i in np.ndindex(*shape)}
        assert len(idx) == np.prod(shape)
        assert C.view_strides(v, (2, 0, 4, 5))[2] == 0


def test_inputs_lie_in_their_views():
    for case in C.cases(quick=True):
        if 0 in case.shape:
            continue
        views = C.layout_views(case.layout)[1]
        slots = (0, 1, 2) if case.op == "bwd" else (2, 1)
        for a, k in zip(C.inputs(case, 1), slots):
            st, off, n = C.view_strides(views[k], case.shape)
            assert a.strides == tuple(s * a.itemsize for s in st), case.name
            assert a.base.size == n
        if case.layout == "permuted" and case.shape[2] > 1:    # nheads inside headdim
            z = C.inputs(case, 1)[1]
            assert z.strides[3] != z.itemsize                # the strided-innermost path
