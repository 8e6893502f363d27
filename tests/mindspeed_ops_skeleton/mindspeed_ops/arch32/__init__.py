"""Stand-in for mindspeed_ops.arch32 (Atlas A2/A3 implementations)."""
