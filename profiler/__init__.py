"""The profiler: the included trainer, trace recording, Kineto parsing, calibration and replay.

This is the only package that imports torch, and it does so lazily (inside functions), so the
simulator and ``trainsim analyze`` of existing traces work without torch installed.
"""
