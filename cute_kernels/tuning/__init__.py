"""Tuning data and the heuristics that read it, kept apart from kernel code.

Everything here is plain Python over measured numbers (perf/RESULTS.md says where each came
from): which tile, cluster and schedule a problem gets. Kernels take these as constructor
arguments; ops ask this package what to pass. Re-measure with perf/gemm_tuning.py and
perf/attention_tuning.py and edit the tables here.
"""
