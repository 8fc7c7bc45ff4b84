"""From measured tables to the notebooks' figures: ``pipeline`` runs the notebooks (papermill) and checks their
parameters; ``plotting`` draws every figure and saves figures and tables. (``results`` and ``provenance``, which
read ``data/`` back and stamp every row, still live at the package top.)
"""
