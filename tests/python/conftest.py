import os
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
