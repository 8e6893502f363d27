"""Upstream's original Triton implementation, taken from the user's mamba_ssm at generation time.

MindSpeed-Ops asks an operator to carry the original Triton implementation beside its NPU one.
zgate never stores upstream's code: `original_module(package_root(path), header, doc)` reads
mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py from a state-spaces/mamba checkout or an
installed mamba_ssm package, and returns the text of one module holding upstream's kernel
`mamba3_siso_bwd_kernel_dzdo` and its launcher `compute_dzdo` character for character, with
whatever they use from upstream (its helpers, copied the same way, never imported) and the
imports they need from elsewhere; each upstream file's copyright lines go above the header.
"""
import ast
import os
import re
import sys

MODULE = "mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd"
NAMES = ("mamba3_siso_bwd_kernel_dzdo", "compute_dzdo")
HOW = ("pass --upstream PATH: a state-spaces/mamba checkout, or the folder of an installed "
       "mamba_ssm (python -c \"import mamba_ssm, os; print(os.path.dirname(mamba_ssm.__file__))\")")


class UpstreamError(Exception):
    pass


def package_root(path):
    """The folder holding the mamba_ssm package, from a checkout or the package folder."""
    path = os.path.abspath(path)
    for root in (path, os.path.dirname(path)):
        if os.path.isfile(_file_of(root, MODULE)):
            return root
    raise UpstreamError("%s holds no %s: %s" % (path, _file_of("", MODULE).lstrip("/"), HOW))


def _file_of(root, module):
    return os.path.join(root, *module.split(".")) + ".py"


class _Source:
    """One upstream file: its text, top-level functions and the names its imports bind."""

    def __init__(self, root, module):
        self.module, self.path = module, _file_of(root, module)
        with open(self.path, encoding="utf-8") as f:
            self.text = f.read()
        tree = ast.parse(self.text)
        self.lines = self.text.splitlines(keepends=True)
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.constants = {
            t.id: n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)}
        self.imports = {}          # bound name -> (module, name or None, asname)
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    bound = a.asname or a.name.split(".")[0]
                    self.imports[bound] = (a.name if a.asname else bound, None, a.asname)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                for a in node.names:
                    self.imports[a.asname or a.name] = (node.module, a.name, a.asname)
        doc = ast.get_docstring(tree) or ""
        head = "".join(self.lines[:tree.body[0].lineno - 1]) if tree.body else ""
        self.notices = [re.sub(r"^[#\s]*", "", ln).rstrip()
                        for ln in (head + "\n" + doc).split("\n") if "copyright" in ln.lower()]

    def node(self, name):
        return self.functions.get(name) or self.constants.get(name)

    def text_of(self, name):
        node = self.node(name)
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno]) - 1
        return "".join(self.lines[start:node.end_lineno])


def _used_names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def original_module(root, header, docstring):
    """The text of the tree's module of upstream's implementation, from `root` (package_root's
    answer). `header(notices)` gives the comment lines that open it (upstream's copyright
    lines first); `docstring` is its text."""
    sources, order, imports, taking = {}, [], [], set()

    def source(module):
        if module not in sources:
            if not os.path.isfile(_file_of(root, module)):
                raise UpstreamError("%s imports from %s, which is not under %s" % (
                    MODULE, module, root))
            sources[module] = _Source(root, module)
        return sources[module]

    def take(module, name):
        src = source(module)
        if (module, name) in order or (module, name) in taking:
            return
        if src.node(name) is None:
            raise UpstreamError("%s has no function %s (mamba_ssm changed: check the tree's "
                                "generator)" % (src.path, name))
        taking.add((module, name))
        for used in sorted(_used_names(src.node(name))):
            if src.node(used) is not None and used != name:
                take(module, used)
            elif used in src.imports:
                mod, attr, asname = src.imports[used]
                if mod.split(".")[0] == "mamba_ssm":
                    if attr is None:
                        raise UpstreamError("%s uses module %s as a whole: copy by hand" % (
                            name, mod))
                    take(mod, attr)
                elif (mod, attr, asname) not in imports:
                    imports.append((mod, attr, asname))
        order.append((module, name))

    for name in NAMES:
        take(MODULE, name)
    notices = []
    for module in sources:
        notices += [n for n in sources[module].notices if n not in notices]
    if not notices:
        raise UpstreamError("%s carries no copyright line to keep" % sources[MODULE].path)
    lines = ["import %s%s" % (m, " as %s" % a if a else "") if attr is None else
             "from %s import %s%s" % (m, attr, " as %s" % a if a else "")
             for m, attr, a in imports]
    stdlib = [ln for ln in lines if ln.split()[1].split(".")[0] in sys.stdlib_module_names]
    groups = [sorted(stdlib), sorted(set(lines) - set(stdlib))]
    # module-level constants first (a kernel reads them when it is compiled), then functions
    constants = "".join(sources[m].text_of(n) for m, n in order if n in sources[m].constants)
    body = "\n\n\n".join(sources[m].text_of(n).rstrip("\n") + "\n" for m, n in order
                          if n not in sources[m].constants)
    sections = ["\n\n".join("\n".join(g) for g in groups if g)]
    sections += [constants.rstrip("\n")] if constants else []
    return "%s\n%s\n%s" % (header(notices), '"""%s"""' % docstring,
                            "\n\n\n".join(sections + [body]))
