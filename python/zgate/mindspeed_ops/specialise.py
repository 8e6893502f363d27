"""The tree's backward-only kernel and plan, cut from zgate.triton's source by rule.

Kernel: the @triton.jit functions of zgate/triton/kernel.py, gate_kernel specialised to
BACKWARD=True: its one `if BACKWARD:` statement becomes that branch's body (the forward
branches go), the BACKWARD parameter goes, the function is renamed KERNEL_NAME and its
docstring becomes KERNEL_DOC. The cut is made on the text, so comments stay, and checked on
the syntax tree: the result must equal the original's tree with the same rule applied to it.

Plan: the top-level pieces of zgate/triton/plan.py named in PLAN_PIECES, each whole (with
the comment lines right above it), in file order, with the imports they use. A piece that
uses a plan.py name not taken is an error, so the tree cannot silently keep a forward slot or
the any-rank rules. Everything cut is checked for words that point into zgate.
"""
import ast
import itertools
import os
import pathlib
import re

TRITON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "triton")
KERNEL_FILE = os.path.join(TRITON_DIR, "kernel.py")
PLAN_FILE = os.path.join(TRITON_DIR, "plan.py")

SOURCE_KERNEL = "gate_kernel"
SWITCH = "BACKWARD"             # the constexpr fixed to True
KERNEL_NAME = "mamba3_siso_bwd_dzdo_kernel"
# the docstring as it stands in the function (4 spaces in)
KERNEL_DOC = '''"""(do, z, o) -> (dz, do_scaled), written through dz_ptr and dos_ptr
    (dout_ptr is do). OUT16: both outputs are 16-bit (the 16-bit recipe); BLOCK_R x BLOCK_C:
    the tile."""'''
JIT_FUNCTIONS = ["_tile_base", SOURCE_KERNEL]
PLAN_PIECES = ["INT32_MAX", "MIN_BLOCK_C", "BACKWARD_SLOTS", "Layout", "Tiles",
               "compact_strides", "collapse_dims", "collapse", "TILE_COST", "choose_tiles",
               "plan_call", "backward_arguments"]
# Words that point into zgate (its files, its C limits) or at the dropped forward path.
FOREIGN = re.compile(r"zgate|validate\.c|_internal\.h|ZGATE_|MAX_NDIM|(?-i:\bBACKWARD\b)|forward|"
                     r"\bfwd\b|rank 0", re.I)


def _start(lines, node):
    """The first line (0-based) of a top-level node: its decorators, and the comment lines
    right above it."""
    i = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while i > 0 and lines[i - 1].lstrip().startswith("#"):
        i -= 1
    return i


def _defined(node):
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _check_words(text, what):
    m = FOREIGN.search(text)
    if m:
        raise RuntimeError("%s: %r would point the tree into zgate or its forward path (%r)"
                           % (what, m.group(0), text[max(0, m.start() - 40):m.end() + 40]))


def _is_switch(node):
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == SWITCH


class _Fold(ast.NodeTransformer):
    """The rule on a syntax tree: the reference the text cut is checked against."""

    def visit_If(self, node):
        self.generic_visit(node)
        return node.body if _is_switch(node) else node


def _fold_tree(fn):
    fn = _Fold().visit(fn)
    fn.name = KERNEL_NAME
    fn.args.args = [a for a in fn.args.args if a.arg != SWITCH]
    fn.body[0] = ast.parse(KERNEL_DOC).body[0]
    return fn


def specialise_kernel(src):
    """(name, text) of `src`'s jitted function SOURCE_KERNEL specialised as the module
    docstring says."""
    fn = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)
          and n.name == SOURCE_KERNEL][0]
    lines = src.splitlines(keepends=True)
    switches = [n for n in ast.walk(fn) if _is_switch(n)]
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == SWITCH]
    if len(switches) != 1 or len(uses) != 1:
        raise RuntimeError("%s: expected one `if %s:` and no other use of it, found %d and %d"
                           % (SOURCE_KERNEL, SWITCH, len(switches), len(uses) - len(switches)))
    sw = switches[0]
    body = lines[sw.body[0].lineno - 1:sw.body[-1].end_lineno]
    shift = sw.body[0].col_offset - sw.col_offset
    body = [ln[shift:] if ln.strip() else ln for ln in body]
    doc = fn.body[0]
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
            and doc.col_offset == 4):
        raise RuntimeError("%s has no docstring to replace" % SOURCE_KERNEL)
    doc_lines = [" " * doc.col_offset + KERNEL_DOC + "\n"]   # KERNEL_DOC: indented for it
    # the switch first, then the docstring above it: earlier line numbers stay valid
    out = list(lines[_start(lines, fn):fn.end_lineno])
    base = _start(lines, fn)
    out[sw.lineno - 1 - base:sw.end_lineno - base] = body
    out[doc.lineno - 1 - base:doc.end_lineno - base] = doc_lines
    head = "".join(out[:doc.lineno - 1 - base])        # decorator and signature
    head, n = re.subn(r"\b%s: tl\.constexpr,\s*" % SWITCH, "", head)
    if n != 1:
        raise RuntimeError("%s's signature: %s is not a constexpr followed by others"
                           % (SOURCE_KERNEL, SWITCH))
    old, new = "def %s(" % SOURCE_KERNEL, "def %s(" % KERNEL_NAME
    head_lines = head.replace(old, new).splitlines(keepends=True)
    d = next(i for i, ln in enumerate(head_lines) if ln.startswith(new))
    # the parameters' continuation lines stay aligned with the opening parenthesis
    head_lines[d + 1:] = [" " * (len(new) - len(old)) + ln for ln in head_lines[d + 1:]]
    text = "".join(head_lines) + "".join(out[doc.lineno - 1 - base:])
    got = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    if len(got) != 1 or ast.dump(got[0]) != ast.dump(_fold_tree(fn)):
        raise RuntimeError("the cut of %s does not match its syntax tree with %s=True"
                           % (SOURCE_KERNEL, SWITCH))
    return KERNEL_NAME, text


def backward_kernel(src=None):
    """The tree kernel file's functions: kernel.py's jitted helpers whole, then the kernel
    specialised."""
    src = pathlib.Path(KERNEL_FILE).read_text(encoding="utf-8") if src is None else src
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    jitted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(
        ast.unparse(d) in ("triton.jit", "jit") for d in n.decorator_list)]
    if [n.name for n in jitted] != JIT_FUNCTIONS:
        raise RuntimeError("kernel.py's jitted functions are %s, not %s: check specialise.py"
                           % ([n.name for n in jitted], JIT_FUNCTIONS))
    parts = ["".join(lines[_start(lines, n):n.end_lineno]) for n in jitted[:-1]]
    parts.append(specialise_kernel(src)[1])
    text = "\n\n".join(parts)
    _check_words(text, "the tree's kernel")
    return text


def plan_pieces(src=None):
    """(import lines, pieces text) of plan.py's PLAN_PIECES."""
    src = pathlib.Path(PLAN_FILE).read_text(encoding="utf-8") if src is None else src
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    top = {name: node for node in tree.body for name in _defined(node)}
    missing = [p for p in PLAN_PIECES if p not in top]
    if missing:
        raise RuntimeError("plan.py has no %s: check specialise.PLAN_PIECES" % missing)
    nodes = sorted({id(top[p]): top[p] for p in PLAN_PIECES}.values(), key=lambda n: n.lineno)
    used = {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}
    stray = sorted((used & set(top)) - set(PLAN_PIECES))
    if stray:
        raise RuntimeError("the plan's pieces use %s, which the tree does not take" % stray)
    imports = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name in used]
            imports += ["import %s" % n for n in names]
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names if a.name in used]
            if names:
                imports.append("from %s import %s" % (node.module, ", ".join(names)))
    block = (ast.FunctionDef, ast.ClassDef)
    text = ""
    for prev, node in zip([None] + nodes, nodes):
        piece = "".join(lines[_start(lines, node):node.end_lineno]).rstrip("\n")
        if prev is not None:   # PEP 8: two blank lines around a class or function
            text += "\n\n\n" if isinstance(prev, block) or isinstance(node, block) else (
                "\n\n" if piece.startswith("#") else "\n")
        text += piece
    _check_words(text, "the tree's plan")
    return "\n".join(imports), text


def fills():
    """The markers of the arch32 templates."""
    from ..triton import plan
    bwd_tiles = {plan.npu_tile("bwd", c) for c in itertools.product(plan.DTYPE_BYTES, repeat=5)}
    if bwd_tiles != {plan.NPU_TILE}:
        raise RuntimeError("the backward's NPU tile depends on dtypes now (%s): the tree's "
                           "NPU_TILE is one number" % sorted(bwd_tiles))
    imports, pieces = plan_pieces()
    return {"BWD_KERNEL": backward_kernel(), "PLAN_IMPORTS": imports, "PLAN_PIECES": pieces,
            "NPU_TILE": str(plan.NPU_TILE), "GPU_TILE": str(plan.GPU_TILE)}
