"""Stand-in for mindspeed_ops.arch32.triton (its operators' modules left out)."""
