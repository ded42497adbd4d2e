"""Optional extras on a measurement-only node (issue 22).

The offline bundle's ``pipeline`` profile ships no polars (bundle/profiles.toml, ``[pipeline.omit]``): the
measurement path — the workflow's parse and plan, the runner, the engine adapters, the meter, the GPU
calibration — imports none of the analysis extra's modules. The few places on that path that use one for
something optional (the reference evidence's contents at parse time, the plan's predictions, a round profile's
table) catch the import error, ask :func:`missing_analysis_module` whether it is one of these, and say what they
left out; any other missing module is a real fault and is raised.
"""

from __future__ import annotations

# The analysis and report stages' modules (pyproject extra `analysis`, and polars, which the bundle omits).
ANALYSIS_MODULES: tuple[str, ...] = ("polars", "altair", "vl_convert", "jinja2")

INSTALL_HINT = "the analysis extra: `pip install polars altair vl-convert-python`, or the bundle's --profile analysis"


def missing_analysis_module(exc: ModuleNotFoundError) -> str | None:
    """The analysis module whose absence raised ``exc``, or None when it is another module (re-raise that)."""
    top = (exc.name or "").partition(".")[0]
    return top if top in ANALYSIS_MODULES else None
