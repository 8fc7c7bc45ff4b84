"""Error metrics and the acceptance tolerances used everywhere.

Tolerances (issue #2): out cosine distance <= 5e-6, ||d||/||ref|| <= 3e-3, each element
within 0.1*rms(ref) + (2.01/128)*|ref|; lse within 1e-6 abs or 8.01/65536 rel, +inf
exactly where the reference says +inf.
"""
from __future__ import annotations

import math

import torch

OUT_COS_DIST = 5e-6
OUT_REL_NORM = 3e-3
OUT_ELEM_RMS = 0.1
OUT_ELEM_REL = 2.01 / 128
LSE_ABS = 1e-6
LSE_REL = 8.01 / 65536


def compare(out, lse, ref_out, ref_lse) -> dict:
    """Compare (out, lse) to a reference; return metrics and a ``passed`` flag.

    out, ref_out: [b, s_q, h, d]; lse, ref_lse: [b, h, s_q] (ref +inf where no token is valid).
    """
    o, r = out.double().cpu(), ref_out.double().cpu()
    if o.shape != r.shape:
        raise ValueError(f"out: shape {tuple(o.shape)} does not match reference {tuple(r.shape)}")
    finite = bool(torch.isfinite(o).all())
    d = o - r
    rn = r.norm().item()
    rel = d.norm().item() / rn if rn > 0 else d.norm().item()
    denom = (o.norm() * r.norm()).item()
    cos_dist = 1.0 - (o * r).sum().item() / denom if denom > 0 else (0.0 if o.norm() == r.norm() else 1.0)
    rms = r.pow(2).mean().sqrt().item()
    bound = OUT_ELEM_RMS * rms + OUT_ELEM_REL * r.abs()
    elem_ratio = (d.abs() / bound.clamp_min(1e-300)).max().item() if d.numel() else 0.0

    l, rl = lse.double().cpu(), ref_lse.double().cpu()
    if l.shape != rl.shape:
        raise ValueError(f"lse: shape {tuple(l.shape)} does not match reference {tuple(rl.shape)}")
    inf_ref, inf_got = torch.isposinf(rl), torch.isposinf(l)
    inf_match = bool(torch.equal(inf_ref, inf_got))
    fin = ~inf_ref & ~inf_got
    lse_abs = (l - rl).abs()[fin]
    lse_tol = torch.maximum(torch.full_like(rl[fin], LSE_ABS), LSE_REL * rl[fin].abs())
    lse_ratio = (lse_abs / lse_tol).max().item() if lse_abs.numel() else 0.0
    lse_finite = bool(torch.isfinite(l[~inf_got]).all())
    m = dict(out_rel_norm=rel, out_cos_dist=cos_dist, out_elem_ratio=elem_ratio,
             out_max_abs=d.abs().max().item() if d.numel() else 0.0,
             lse_max_abs=lse_abs.max().item() if lse_abs.numel() else 0.0, lse_ratio=lse_ratio,
             lse_inf_match=inf_match, finite=finite and lse_finite)
    m["passed"] = bool(m["finite"] and inf_match and rel <= OUT_REL_NORM and cos_dist <= OUT_COS_DIST
                       and elem_ratio <= 1.0 and lse_ratio <= 1.0)
    return m


def assert_close(out, lse, ref_out, ref_lse, what: str = "") -> dict:
    m = compare(out, lse, ref_out, ref_lse)
    if not m["passed"]:
        shown = {k: (f"{v:.3g}" if isinstance(v, float) and not math.isnan(v) else v) for k, v in m.items()}
        raise AssertionError(f"{what} outside tolerance: {shown}")
    return m
