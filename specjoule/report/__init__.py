"""Figures (Altair) and the self-contained HTML report (Jinja2) built from the analysis tables."""
