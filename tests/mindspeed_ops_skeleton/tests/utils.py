"""Stand-in for MindSpeed-Ops' tests/utils.py: assert_close with its public signature and
behaviour (a root-mean-square ratio check after an absolute shortcut)."""
import logging
import warnings

logger = logging.getLogger(__name__)


def assert_close(prefix, ref, tri, ratio, warning=False, err_atol=1e-6):
    """Passes when max|ref - tri| <= err_atol; otherwise the root-mean-square of ref - tri over
    that of ref must be under `ratio` (a warning instead of a failure with warning=True)."""
    diff = (ref.detach() - tri.detach()).flatten().double()
    abs_err = diff.abs().max().item()
    rms_ratio = diff.square().mean().sqrt().item() / (
        ref.detach().flatten().double().square().mean().sqrt().item() + 1e-8)
    msg = "%16s diff: %.6f ratio: %.6f" % (prefix, abs_err, rms_ratio)
    logger.info(msg)
    if abs_err <= err_atol:
        return
    if warning:
        if rms_ratio > ratio:
            warnings.warn(msg)
    else:
        assert rms_ratio < ratio, msg
