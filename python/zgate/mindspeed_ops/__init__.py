"""python -m zgate.mindspeed_ops OUT --upstream PATH: zgate's NPU operator as a MindSpeed-Ops
contribution.

Writes, under OUT, the files to copy onto a MindSpeed-Ops checkout (OUT/MAMBA3_DZDO_README.md
says where each goes and what to append to existing files). They are generated from zgate's one
source and never edited apart: the arch32 kernel and plan are cut from zgate/triton/kernel.py
and plan.py by rule (specialise.py: the backward only); the rest comes from the templates in
tree/ (files ending in .in), whose @@NAME@@ markers are filled below; upstream's original Triton
implementation is copied from the user's mamba_ssm (upstream.py). Every file opens with the
Apache-2.0 header of MindSpeed-Ops' files (--holder names the copyright holder). No generated
file imports zgate: they take torch, triton and the standard library (pytest and numpy in
tests; ATK's own modules in its wrapper).

Exit status: 0, the tree written whole; 3, written without upstream's implementation (no
--upstream: the message says what is missing and how to add it); 2, nothing written (bad
arguments, an unreadable upstream, OUT not writable).
"""
import argparse
import math
import os
import pathlib
import re
import sys
import time

from .. import __version__
from .. import cases as _cases
from . import specialise
from . import upstream as _upstream

TREE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tree")
ORIGINAL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_original.py"
ORIGINAL_DOC = """The original Triton implementation of mamba3_siso_bwd_kernel_dzdo, unchanged:
upstream's kernel and its launcher compute_dzdo from
mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py of state-spaces/mamba (Apache-2.0), mamba_ssm
version %s.

It runs on CUDA only; the unit tests and ATK's GPU node run it as the competitor. At a headdim
that is not a power of two it reads and writes past each row (its mask compares with the
padded width): it is compared at powers of two only.
"""
# ATK's cases: small odd shapes of the model's headdims (and a tiny odd one), then the model's
ATK_SMALL_SHAPES = [(2, 5, 3, 64), (1, 7, 2, 80), (2, 3, 2, 96), (1, 4, 3, 128), (1, 2345, 1, 3)]
ATK_LAYOUTS = ["dense", "in_proj"]
HOLDER = "HUAWEI CORPORATION"
LICENSE = """Copyright (c) {year}, {holder}. All rights reserved.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License."""


# The README's table row for ORIGINAL: a row places a file (apply.py copies every backticked
# path of the table), so without --upstream the row names the file as missing, unplaced.
ORIGINAL_ROW = ("| `%s` | upstream's kernel and `compute_dzdo`, unchanged under their authors' "
                "notice (CUDA only) |" % ORIGINAL)
MISSING_ORIGINAL_ROW = ("| %s (missing) | upstream's kernel and `compute_dzdo`, which this tree "
                        "lacks: generate it again with `--upstream PATH` (a state-spaces/mamba "
                        "checkout or an installed `mamba_ssm`) before the pull request |" % ORIGINAL)


def fills(with_original=True):
    """The value of each @@NAME@@ marker of the templates; with_original: the tree holds
    ORIGINAL."""
    model = [tuple(s) for s in _cases.real_shapes()]
    return {
        **specialise.fills(),
        "ORIGINAL_ROW": ORIGINAL_ROW if with_original else MISSING_ORIGINAL_ROW,
        "MODEL_SHAPES": _shape_list(model),
        "ATK_SHAPES": _shape_list(ATK_SMALL_SHAPES + model),
        "ATK_LAYOUTS": repr(ATK_LAYOUTS),
        # the yaml's dim_values: every size of the cases' shapes (the generator sets them)
        "ATK_DIM_VALUES": repr(sorted({n for s in ATK_SMALL_SHAPES + model for n in s})),
        # ATK makes dtype_numbers cases per dtype: each shape once in each layout
        "ATK_CASES_PER_DTYPE": str(len(ATK_SMALL_SHAPES + model) * len(ATK_LAYOUTS)),
        "ATK_MAX_LENGTH": str(max(math.prod(s) for s in ATK_SMALL_SHAPES + model)),
        "TRITON_F32_ULPS": str(_cases.TRITON_F32_ULPS),
        "GOLDEN_F32_ULPS": str(_cases.GOLDEN_F32_ULPS),
        "VERSION": __version__,
    }


def _shape_list(shapes, per_line=4):
    rows = [", ".join(map(repr, shapes[i:i + per_line])) for i in range(0, len(shapes), per_line)]
    return "[\n    %s,\n]" % ",\n    ".join(rows)


def license_lines(holder, notices=()):
    """The header's lines: `notices` (upstream's copyright lines) first, then the holder's
    Apache-2.0 header."""
    return list(notices) + LICENSE.format(year=time.gmtime().tm_year, holder=holder).split("\n")


def _comment(lines):
    return "\n".join("# " + ln if ln else "#" for ln in lines)


def render(text, values, name, holder=HOLDER):
    """The template's text with its markers filled; its header line (`# @@HEADER@@` in Python
    and yaml, `<!-- @@HEADER@@ -->` in Markdown) becomes the license header."""
    lines = license_lines(holder)
    text = re.sub(r"^# @@\w*HEADER@@$", lambda m: _comment(lines), text, flags=re.M)
    text = re.sub(r"^<!-- @@HEADER@@ -->$", lambda m: "<!--\n%s\n-->" % "\n".join(lines),
                  text, flags=re.M)
    for key, value in values.items():
        text = text.replace("@@%s@@" % key, value)
    if "@@" in text:
        raise RuntimeError("%s: unfilled marker near %r" % (name, text[text.find("@@"):][:40]))
    return text


def original(upstream, holder=HOLDER):
    """The text of the tree's ORIGINAL file, from the mamba_ssm at `upstream` (a checkout or
    the package's folder); UpstreamError says what is wrong with it."""
    root = _upstream.package_root(upstream)
    init = pathlib.Path(root, "mamba_ssm", "__init__.py")
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", init.read_text(encoding="utf-8"),
                        re.M) if init.is_file() else None
    doc = ORIGINAL_DOC % (version.group(1) if version else "(version unknown)")
    return _upstream.original_module(root, lambda n: _comment(license_lines(holder, n)), doc)


def generate(out, upstream=None, holder=HOLDER):
    """Write the tree under `out` (created; existing files of the tree are replaced, nothing
    else is touched); upstream's implementation (ORIGINAL) only with `upstream`, the path of
    a mamba checkout or mamba_ssm package. Returns the written paths, relative to `out`.
    Everything is read before anything is written: UpstreamError leaves `out` untouched."""
    values, written = fills(with_original=bool(upstream)), []
    todo = [(ORIGINAL, original(upstream, holder))] if upstream else []
    for root, _, files in os.walk(TREE):
        for fn in sorted(files):
            if fn.endswith(".in"):
                rel = os.path.relpath(os.path.join(root, fn), TREE)[:-3]
                text = pathlib.Path(root, fn).read_text(encoding="utf-8")
                todo.append((rel, render(text, values, rel, holder)))
    for rel, text in sorted(todo):      # every template rendered before anything is written
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(rel)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m zgate.mindspeed_ops",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the folder to write the tree into (created if missing)")
    ap.add_argument("--upstream", metavar="PATH",
                    help="a state-spaces/mamba checkout or an installed mamba_ssm folder: "
                         "upstream's kernel is copied from it into %s" % ORIGINAL)
    ap.add_argument("--holder", default=HOLDER,
                    help="the copyright holder of the license headers (default: %(default)s)")
    a = ap.parse_args(argv)
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        print("error: %s exists and is not a folder" % a.out, file=sys.stderr)
        return 2
    try:
        written = generate(a.out, a.upstream, a.holder)
    except (OSError, _upstream.UpstreamError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    print("\n".join(written))
    print("%d files written under %s" % (len(written), a.out))
    if not a.upstream:
        print("missing: %s, upstream's original Triton implementation, which MindSpeed-Ops "
              "requires beside the NPU one; to add it, %s" % (ORIGINAL, _upstream.HOW),
              file=sys.stderr)
        return 3
    return 0
