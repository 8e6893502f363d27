"""A compute_dzdo inside an installed mamba_ssm (zgate.torch.use_in_mamba_ssm puts zgate's there).

Upstream's Mamba-3 SISO backward (mamba3_siso_combined.py) imports compute_dzdo *by name*
from mamba3_siso_bwd.py, so setting the attribute of the defining module alone changes
nothing for modules already imported. use_in_mamba_ssm() therefore:
  1. imports the defining module (optionally without running mamba_ssm/__init__.py);
  2. imports every not-yet-imported module under the package whose source mentions
     compute_dzdo, so that the modules that bind it by name exist;
  3. points every module attribute under the package that *is* upstream's function (by
     identity, whatever its name) at one dispatcher, which calls the newest active handle's
     function and counts the call on that handle.
Modules imported later bind the dispatcher from the patched definition; the last undo()
points every attribute that holds the dispatcher back at upstream's function.
"""
import importlib
import importlib.util
import logging
import os
import sys
import tempfile
import threading
import warnings

DEFINING_MODULE = "mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd"
NAME = "compute_dzdo"
_MIN_VERSION = "mamba-ssm 2.3.2 or later (pip install mamba-ssm)"

_log = logging.getLogger("zgate")
_lock = threading.RLock()
_installed = {}  # defining module's name -> _Installation


class MambaPatch:
    """What one use_in_mamba_ssm() call changed. undo() (or leaving its `with` block) takes it
    back; undoing twice is harmless.

    replaced  "module.attr" names that point to the replacement (the definition first)
    skipped   modules under the package that mention compute_dzdo but failed to import, with why
    calls     calls that reached this handle's function (a later, still active
              use_in_mamba_ssm() takes the calls while it lasts)
    original  upstream's function
    function  the function installed (zgate.torch.compute_dzdo unless another was given)
    active    False once undone
    """

    def __init__(self, installation, function, replaced, skipped):
        self._inst = installation
        self.function = function
        self.original = installation.original
        self.replaced = replaced
        self.skipped = skipped
        self.calls = 0
        self.active = True

    def undo(self):
        with _lock:
            if not self.active:
                return
            self.active = False
            inst = self._inst
            inst.stack.remove(self)
            if inst.stack:
                return  # an earlier handle's function is called from now on
            restored = _point(inst, inst.original)
            del _installed[inst.module.__name__]
        _log.info("upstream %s restored at %s", NAME, ", ".join(restored))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()


class _Installation:
    """One defining module's replaced function: the active handles, newest last."""

    def __init__(self, module, original):
        self.module = module
        self.root = module.__name__.partition(".")[0]
        self.original = original
        self.stack = []

        def compute_dzdo(*args, **kwargs):
            """use_in_mamba_ssm's stand-in for upstream's compute_dzdo."""
            with _lock:
                handle = self.stack[-1] if self.stack else None
                if handle is not None:
                    handle.calls += 1
            # the original for a reference kept past the last undo()
            return (handle.function if handle else self.original)(*args, **kwargs)
        self.dispatch = compute_dzdo


def _under(modname, root):
    return modname == root or modname.startswith(root + ".")


def _point(inst, target):
    """Set every attribute under the package that holds upstream's function or the dispatcher
    to target; return the "module.attr" names, the defining module first."""
    names, modules = [], list(sys.modules.items())
    if sys.modules.get(inst.module.__name__) is not inst.module:  # imported under another name
        modules.append((inst.module.__name__, inst.module))
    for modname, mod in modules:
        if mod is None or not _under(modname, inst.root):
            continue
        for attr, value in list(getattr(mod, "__dict__", {}).items()):
            if value is inst.original or value is inst.dispatch:
                setattr(mod, attr, target)
                names.append("%s.%s" % (modname, attr))
    first = "%s.%s" % (inst.module.__name__, NAME)
    return sorted(names, key=lambda n: (n != first, n))


def _import_mentioning(root_module, word):
    """Import the modules under the package, not imported yet, whose source mentions word.
    Returns [(module name, why)] for those that failed (an optional dependency missing)."""
    root, skipped = root_module.__name__, []
    for base in list(getattr(root_module, "__path__", [])):
        for dirpath, dirnames, filenames in os.walk(base):
            # Only regular packages: a folder without __init__.py is not code of the package.
            dirnames[:] = sorted(d for d in dirnames if d.isidentifier() and
                                 os.path.isfile(os.path.join(dirpath, d, "__init__.py")))
            rel = os.path.relpath(dirpath, base)
            prefix = [root] + ([] if rel == "." else rel.split(os.sep))
            for fn in sorted(filenames):
                stem = fn[:-3]
                if not fn.endswith(".py") or not stem.isidentifier():
                    continue
                modname = ".".join(prefix + ([] if stem == "__init__" else [stem]))
                if modname in sys.modules:
                    continue
                try:
                    with open(os.path.join(dirpath, fn), encoding="utf-8", errors="replace") as f:
                        if word not in f.read():
                            continue
                except OSError:
                    continue
                try:
                    importlib.import_module(modname)
                except Exception as e:  # one broken optional module must not stop the others
                    skipped.append((modname, "%s: %s" % (type(e).__name__, e)))
    return skipped


def import_mamba_module(name=DEFINING_MODULE, skip_package_init=False):
    """Import module `name` of mamba_ssm (or of another top-level package).

    skip_package_init=True registers the top-level package without running its __init__.py
    (in mamba-ssm 2.3.2 that imports every model, and with them Mamba-1's CUDA extension
    selective_scan_cuda); its submodules then import as usual: the Triton path of Mamba-3
    needs only torch, triton and einops. The package stays registered that way: import what
    you use by its full path (from mamba_ssm.modules.mamba3 import Mamba3)."""
    if name in sys.modules:
        return sys.modules[name]
    root = name.partition(".")[0]
    before = set(sys.modules)
    if root not in sys.modules:
        try:
            spec = importlib.util.find_spec(root)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise ImportError("zgate: %s is not installed: install %s, or put a "
                              "state-spaces/mamba checkout on sys.path" % (root, _MIN_VERSION),
                              name=root)
        if skip_package_init:
            sys.modules[root] = importlib.util.module_from_spec(spec)  # not executed
        else:
            try:
                importlib.import_module(root)
            except ImportError as e:
                raise ImportError(
                    "zgate: importing %s failed (%s). Its __init__.py imports every model and "
                    "their CUDA extensions (selective_scan_cuda, causal_conv1d): %s, or pass "
                    "skip_package_init=True to import only the modules Mamba-3 needs"
                    % (root, e, "install " + e.name if e.name else "fix that"),
                    name=e.name) from e
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if root not in before and skip_package_init:  # take back the bare package and its parts
            for added in set(sys.modules) - before:
                if _under(added, root):
                    del sys.modules[added]
        missing = e.name if isinstance(e, ModuleNotFoundError) else None
        if missing and _under(missing, root):
            why = "this %s has no %s: Mamba-3 needs %s" % (root, missing, _MIN_VERSION)
        elif missing:
            why = "install %s" % missing
        else:
            why = "%s's own modules do not match: reinstall %s" % (root, _MIN_VERSION)
        raise ImportError("zgate: importing %s failed (%s): %s" % (name, e, why),
                          name=e.name) from e


def import_upstream_dzdo(path=None):
    """Upstream's module defining compute_dzdo and its Triton kernel, for comparisons.

    path: a copy of mamba_ssm/ops/triton/mamba3, or a folder holding one as mamba3/ (imported
    under a bare mamba_ssm.ops.triton package made in a temporary folder), or a checkout
    holding mamba_ssm/ (imported without its __init__.py); None: an installed mamba_ssm."""
    if path and os.path.isfile(os.path.join(path, "mamba3_siso_bwd.py")):
        path = os.path.dirname(os.path.abspath(path))
    if path and os.path.isfile(os.path.join(path, "mamba3", "mamba3_siso_bwd.py")):
        if DEFINING_MODULE not in sys.modules:
            root = tempfile.mkdtemp(prefix="zgate_upstream_")
            pkg = os.path.join(root, *DEFINING_MODULE.split(".")[:-2])
            os.makedirs(pkg)
            for d in range(3):
                open(os.path.join(root, *DEFINING_MODULE.split(".")[:d + 1], "__init__.py"),
                     "w").close()
            os.symlink(os.path.abspath(os.path.join(path, "mamba3")), os.path.join(pkg, "mamba3"))
            sys.path.insert(0, root)
        return importlib.import_module(DEFINING_MODULE)
    if path:
        if not os.path.isdir(os.path.join(path, "mamba_ssm")):
            raise ImportError("zgate: %s holds neither mamba3/mamba3_siso_bwd.py nor mamba_ssm/"
                              % path)
        sys.path.insert(0, os.path.abspath(path))
    return import_mamba_module(DEFINING_MODULE, skip_package_init=True)


def install(replacement, module=DEFINING_MODULE, skip_package_init=False):
    """Put `replacement` wherever mamba_ssm looks compute_dzdo up (zgate.torch.use_in_mamba_ssm
    is the public entry; this module imports nothing of zgate's).

    module: the defining module, imported (a module object) or by name.
    Returns a MambaPatch (a context manager too). Raises ImportError, naming what to install,
    when mamba_ssm or the function is missing."""
    if isinstance(module, str):
        module = import_mamba_module(module, skip_package_init)
    if module.__name__ not in _installed and not callable(getattr(module, NAME, None)):
        raise ImportError("zgate: %s has no function %s: Mamba-3's SISO backward needs %s"
                          % (module.__name__, NAME, _MIN_VERSION), name=module.__name__)
    # Outside the lock: an imported module may call compute_dzdo from another thread.
    root_module = sys.modules.get(module.__name__.partition(".")[0])
    skipped = _import_mentioning(root_module, NAME) if root_module is not None else []
    with _lock:
        inst = _installed.get(module.__name__) or _Installation(module, getattr(module, NAME))
        replaced = _point(inst, inst.dispatch)
        handle = MambaPatch(inst, replacement, replaced, skipped)
        inst.stack.append(handle)
        _installed[module.__name__] = inst
    for modname, why in skipped:
        _log.info("%s mentions %s but was not imported: %s", modname, NAME, why)
    _log.info("%s replaced by %s.%s at %s", NAME, getattr(replacement, "__module__", "?"),
              getattr(replacement, "__qualname__", replacement), ", ".join(replaced))
    if len(replaced) < 2:
        warnings.warn("zgate: %s was replaced only where it is defined (%s); no module under %s "
                      "imports it by name, which upstream's mamba3_siso_combined does. Check that "
                      "this version of %s calls it (MambaPatch.calls counts the calls that reach "
                      "the replacement)." % (NAME, ", ".join(replaced) or module.__name__,
                                             inst.root, inst.root), stacklevel=4)
    return handle
