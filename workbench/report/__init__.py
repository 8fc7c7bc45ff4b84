"""From measured tables to the notebooks' figures: ``pipeline`` runs the notebooks (papermill) and checks their
parameters; ``figures`` holds the look, the save helpers and the provenance notes every figure shares, and each
notebook's figures are in their own module (``plots_padding`` 01, ``plots_correctness`` 02, ``plots_occupancy`` 03,
``plots_throughput`` 04, ``plots_ladder`` 05). ``results`` and ``provenance``, which read ``data/`` back and stamp
every row, still live at the package top.
"""
