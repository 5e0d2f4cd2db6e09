"""The one-line explanation when explore finds no runnable plan: counts per reason, a few values
or messages each, and how many there were in all."""

from __future__ import annotations

from sim.explore.pruning import MAX_LISTED, MAX_MESSAGES, REASONS, PruneContext, PruneLog

CTX = PruneContext(gpus=16, global_batch=64, layers=32, hbm_gib=80.0, usable_gib=76.0)


def test_values_and_messages_are_quoted_up_to_their_limits_with_the_total() -> None:
    log = PruneLog()
    for tp in range(1, MAX_LISTED + 3):
        log.add(REASONS[0], 17 * tp)
    messages = [f"schedule rule {i} is broken in a long sentence" for i in range(MAX_MESSAGES + 3)]
    for message in messages:
        log.add(REASONS[4], message)
    line = log.explain(CTX)
    assert "\n" not in line
    assert f"({MAX_LISTED + 2} in all)" in line and f"({MAX_MESSAGES + 3} in all)" in line
    assert sum(message in line for message in messages) == MAX_MESSAGES
    smallest = ", ".join(str(17 * tp) for tp in range(1, MAX_LISTED + 1))
    assert f"tp*cp*pp ({smallest}, ... ({MAX_LISTED + 2} in all))" in line
    assert f"does not divide 16 GPUs: {MAX_LISTED + 2} plans" in line


def test_a_short_list_is_quoted_whole() -> None:
    log = PruneLog()
    log.add(REASONS[4], "only this rule")
    assert log.explain(CTX) == "only this rule: 1 plan"
