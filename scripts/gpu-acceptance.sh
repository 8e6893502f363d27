#!/usr/bin/env bash
# The acceptance run of zgate.triton on CUDA: the acceptance stages of tests/triton/h200.sh.
STAGES=${STAGES:-"build upstream zgate triton triton-up"} exec bash "$(dirname "$0")/../tests/triton/h200.sh"
