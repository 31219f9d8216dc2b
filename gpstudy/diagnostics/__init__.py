"""Checks of the study's GPU path: training probes that count what a step costs, the checks only a GPU can
answer (``device_check``), and TF32's rounding emulated on a CPU (``tf32_emulation``). Used by
``benchmarks/`` and the tests, never by a study's jobs.
"""
