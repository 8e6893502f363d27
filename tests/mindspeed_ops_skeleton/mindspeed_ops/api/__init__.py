"""Stand-in for mindspeed_ops.api."""
