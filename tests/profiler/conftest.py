"""Shared fixtures of the profiler tests (torch imported lazily: most tests do not need it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def _reference_losses(config: Any) -> list[float]:
    """Global loss per step of a plain single-process run of ``config`` (a ``TrainConfig``):
    the unsplit model with the same seeded weights, the whole global batch per step, mean
    cross-entropy, backward, then the optimizer step. The ground truth of the trainer tests."""
    return _reference_run(config)[0]


def _reference_run(config: Any) -> tuple[list[float], Any]:
    """The losses of :func:`_reference_losses` and the trained model."""
    import torch
    import torch.nn.functional as F

    from profiler.trainer.data import global_batch
    from profiler.trainer.model import build_model

    spec = config.model
    model = build_model(spec, seed=config.seed)
    if config.optimizer == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    losses = []
    for step in range(config.total_steps):
        inputs, targets = global_batch(seed=config.seed, step=step, batch=config.global_batch,
                                       seq_len=spec.seq_len, vocab_size=spec.vocab_size)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, model


@pytest.fixture
def reference_losses() -> Callable[[Any], list[float]]:
    """The single-process reference run (see :func:`_reference_losses`)."""
    pytest.importorskip("torch")
    return _reference_losses


@pytest.fixture
def reference_run() -> Callable[[Any], tuple[list[float], Any]]:
    """The single-process reference run: its losses and the trained model."""
    pytest.importorskip("torch")
    return _reference_run
