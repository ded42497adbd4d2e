"""Tooling around the measurement library, not part of it: the offline wheel bundle for an air-gapped GPU node
(bundle.py, make_bundle.py), the scripts run on the device (device/), the headless-browser driver the report test
uses (browser.py), and the golden-file and engine-table generators. Importable as ``tools`` from the repository
root (pytest puts it on the path: pyproject.toml ``pythonpath``)."""
