"""The resource lab, no GPU needed: ``targets`` holds each target's limits (sm_120, sm_100, sm_90, sm_89) and the
occupancy calculation; ``resources`` cross-compiles every kernel config for them and reads registers, spills,
shared memory and load widths back (``python -m workbench resources``); ``profile`` runs one decode shape for
Nsight Compute (``python -m workbench.lab.profile``, used by ``scripts/gpu_session.sh``); ``stalls`` splits ncu's
stall samples by partition; ``sass_loops`` finds the loops of compiled SASS and what each holds.
"""
