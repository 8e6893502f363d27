"""Stand-in for MindSpeed-Ops' top-level package (its import-time CANN set-up left out)."""
