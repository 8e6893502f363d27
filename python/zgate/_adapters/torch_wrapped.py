"""PyTorch tensor subclasses that dispatch operators themselves (DTensor, for one): their
data is not one strided buffer, so calls on them go through zgate.torch's custom ops, which
the subclass runs its own way (a DTensor on its local shards, see zgate.torch)."""
from .._lib import Error

MUTABLE = True
TORCH = True


def via_ops():
    return True


def describe(t, name, output, dlstream, keep):
    raise Error(None, "%s is a %s; pass it with the other tensors of the call of the same kind "
                "(zgate.bwd/fwd route those through torch.ops.zgate)" % (name, type(t).__name__))
