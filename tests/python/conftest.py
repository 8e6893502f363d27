import os
import sys
import zlib

import numpy as np
import pytest

_SEED = int(os.environ.get("ZGATE_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")


def pytest_report_header(config):
    try:
        import zgate
        where = "%s, %s" % (zgate.library_path(), zgate.info()["build_info"])
    except Exception as e:  # the tests then fail with the reason
        where = "not loadable: %s" % e
    return ["zgate test seed: %d (set ZGATE_TEST_SEED to repeat)" % _SEED,
            "libzgate: %s" % where]


@pytest.fixture
def rng(request):
    # A fresh stream per test, reproducible from the printed seed and the test's name.
    salt = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng([_SEED, salt])


@pytest.fixture
def mamba_ssm_sandbox(monkeypatch):
    """For tests that import a synthetic mamba_ssm: sys.path is restored afterwards, every
    mamba_ssm module imported meanwhile is forgotten (those from before come back), and any
    zgate.torch.use_in_mamba_ssm() patch left active is undone."""
    from zgate import _mamba
    under = lambda name: _mamba._under(name, "mamba_ssm")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if under(k)}
    for k in saved:
        del sys.modules[k]
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for inst in list(_mamba._installed.values()):
        for handle in list(inst.stack):
            handle.undo()
    for k in [k for k in sys.modules if under(k)]:
        del sys.modules[k]
    sys.modules.update(saved)
