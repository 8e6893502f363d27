"""zgate's modules import each other without a circle, at import time or deferred inside a
function (a deferred circle still ties the two modules' definitions together). The package
itself (zgate/__init__.py) is not a node: importing any zgate.x runs it first."""
import ast
import os

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "zgate")


def _modules():
    """{module name: path} of every module of the source tree's package."""
    found = {}
    for dirpath, _, filenames in os.walk(SRC):
        rel = os.path.relpath(dirpath, SRC)
        pkg = ["zgate"] + ([] if rel == "." else rel.split(os.sep))
        for fn in filenames:
            if fn.endswith(".py"):
                name = pkg if fn == "__init__.py" else pkg + [fn[:-3]]
                found[".".join(name)] = os.path.join(dirpath, fn)
    return found


def _imports(name, path, known):
    """The zgate modules that `name` imports anywhere in its source."""
    is_pkg = path.endswith("__init__.py")
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            targets = [mod] + ["%s.%s" % (mod, a.name) for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != "zgate" and t != name}
    return out


def test_no_import_circle():
    known = _modules()
    graph = {n: _imports(n, p, known) for n, p in known.items() if n != "zgate"}
    assert "zgate.torch" not in graph["zgate._mamba"], "zgate._mamba imports zgate.torch"
    state, circles = {}, []

    def visit(n, path):
        state[n] = "open"
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                circles.append(path[path.index(m):] + [m])
            elif m not in state:
                visit(m, path + [m])
        state[n] = "done"
    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not circles, "import circles: %s" % ["  ->  ".join(c) for c in circles]
