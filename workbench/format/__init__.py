"""The MODEL1 paged FP8 KV-cache format and what is built on it, with no kernel in sight.

``layout`` the byte format (one executable spec); ``codec`` the cache bytes (quantise/dequantise, page views,
``to_device``/``copy_cache``, index maths); ``cases`` the hostile case builder and the one case catalogue;
``golden`` FlashMLA's golden cases; ``reference`` the fp32 reference decode; ``padding`` notebook 01's live
checks of the 448 -> 512 padding. The public names are re-exported by :mod:`workbench`.
"""
