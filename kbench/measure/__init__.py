"""What reads the machine and the process: the sampler and its sources (psutil, NVML,
RAPL), system facts, model FLOPs, statistics of step times.

May import: nothing else in kbench.
"""
