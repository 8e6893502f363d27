import os
import sys
import zlib

import numpy as np
import pytest

# The Triton kernel runs on CPU tensors only under the interpreter, and Triton reads the
# flag when a kernel is defined: set it before anything imports zgate.triton.kernel.
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))   # zg_oracle
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))                # special_values

_SEED = int(os.environ.get("ZGATE_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")


def pytest_report_header(config):
    return ["zgate test seed: %d (set ZGATE_TEST_SEED to repeat)" % _SEED]


@pytest.fixture
def rng(request):
    return np.random.default_rng([_SEED, zlib.crc32(request.node.nodeid.encode())])
