"""From measured tables to the notebooks' figures: ``pipeline`` runs the notebooks (papermill) and checks their
parameters; ``figures`` holds the look, the save helpers and the provenance notes every figure shares, and each
notebook's figures are in their own module (``plots_padding`` 01, ``plots_correctness`` 02, ``plots_occupancy`` 03,
``plots_throughput`` 04, ``plots_ladder`` 05). ``results`` reads ``data/`` back (which table of a sweep is current,
``python -m workbench.report.results``) and ``provenance`` stamps every row (commit, versions, kernel-source hash).
"""
