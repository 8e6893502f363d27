"""pytest plugin for upstream's Mamba-3 tests, run by scripts/gpu-mamba.sh:

    cd MAMBA_CHECKOUT && PYTHONPATH=ZGATE/tests/mamba:ZGATE/python:. \\
        python3 -m pytest -p mamba_pytest_plugin tests/ops/triton/test_mamba3_siso.py

mamba_ssm is imported without its __init__.py, so Mamba-1's CUDA extensions need not be
built (zgate.torch.use_in_mamba_ssm's skip_package_init). With ZGATE_MAMBA=1,
use_in_mamba_ssm() is in force for the whole pytest run; the summary says where and how many
calls reached zgate, and a run where none did fails. ZGATE_MAMBA_ERRORS=FILE collects
the lines the tests print that hold an error figure ("dZ error: 1.2e-02"), one
"test id<TAB>line" per line, and last the run's outcome, so that two runs can be set
side by side.
"""
import os

_state = {"handle": None}


def pytest_configure(config):
    from zgate import _mamba
    _mamba.import_mamba_module(skip_package_init=True)
    if os.environ.get("ZGATE_MAMBA") == "1":
        import zgate.torch
        _state["handle"] = zgate.torch.use_in_mamba_ssm(skip_package_init=True)
    path = os.environ.get("ZGATE_MAMBA_ERRORS")
    if path:
        _state["errors"] = open(path, "w")


def pytest_runtest_logreport(report):
    out = _state.get("errors")
    if out is None or report.when != "call":
        return
    for line in report.capstdout.splitlines():
        if "error" in line and ":" in line and not line.lstrip().startswith("Top"):
            out.write("%s\t%s\n" % (report.nodeid, line.strip()))
    out.flush()


def pytest_sessionfinish(session, exitstatus):
    h = _state["handle"]
    if h is not None and h.calls == 0 and exitstatus == 0:
        session.exitstatus = 1  # passing without zgate having run proves nothing about zgate
    out = _state.pop("errors", None)
    if out is not None:
        out.write("(run)\t%d tests selected, %d failed, exit status %d; %s\n" % (
            len(session.items), session.testsfailed, int(session.exitstatus),
            "zgate not in use" if h is None else "%d calls reached zgate" % h.calls))
        out.close()


def pytest_terminal_summary(terminalreporter):
    h = _state["handle"]
    if h is None:
        terminalreporter.write_line("zgate: not in use (upstream's compute_dzdo as shipped)")
    else:
        terminalreporter.write_line("zgate: compute_dzdo replaced at %s; %d calls reached zgate"
                                    % (", ".join(h.replaced), h.calls))
