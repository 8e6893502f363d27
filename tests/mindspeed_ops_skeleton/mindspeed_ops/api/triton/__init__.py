"""Stand-in for mindspeed_ops.api.triton, which exports its operators' functions (left out
here); a contribution appends its own exports below."""
