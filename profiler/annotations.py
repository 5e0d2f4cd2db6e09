"""Names of the ``record_function`` ranges the trainer emits and the parser reads.

The trainer wraps each pipeline action, each transformer layer and the optimizer step in a
profiler range whose name encodes the labels, so the parser labels spans without guessing:

    trainsim:F s=2 c=1 mb=3      forward of virtual stage 2 (chunk 1 on its rank), micro-batch 3
    trainsim:B s=2 c=1 mb=3      backward (input-gradient half when W actions exist)
    trainsim:W s=2 c=1 mb=3      weight-gradient half (zero-bubble schedules)
    trainsim:layer 7             transformer layer 7 (global index), nested in an action
    trainsim:optimizer           the optimizer step
    trainsim:step 4              one training step (besides torch's own ProfilerStep#N)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "trainsim:"
OPTIMIZER = "trainsim:optimizer"
_ACTION_RE = re.compile(r"^trainsim:([FBW]) s=(\d+) c=(\d+) mb=(\d+)$")
_LAYER_RE = re.compile(r"^trainsim:layer (\d+)$")
_STEP_RE = re.compile(r"^trainsim:step (\d+)$")


@dataclass(frozen=True, slots=True)
class ActionLabel:
    """The labels carried by an action range."""

    phase: str
    stage: int
    chunk: int
    microbatch: int


def action_name(phase: str, stage: int, chunk: int, microbatch: int) -> str:
    """Range name for a pipeline action."""
    return f"{PREFIX}{phase} s={stage} c={chunk} mb={microbatch}"


def layer_name(layer: int) -> str:
    """Range name for a transformer layer."""
    return f"{PREFIX}layer {layer}"


def step_name(step: int) -> str:
    """Range name for a training step."""
    return f"{PREFIX}step {step}"


def parse_action(name: str) -> ActionLabel | None:
    """Labels of an action range name, or None if ``name`` is not one."""
    m = _ACTION_RE.match(name)
    if not m:
        return None
    return ActionLabel(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))


def parse_layer(name: str) -> int | None:
    """Layer index of a layer range name, or None."""
    m = _LAYER_RE.match(name)
    return int(m.group(1)) if m else None


def parse_step(name: str) -> int | None:
    """Step index of a step range name, or None."""
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else None
