"""FAULT INJECTOR — not a package. A node without the analysis extra, like the GPU image the offline bundle's
`pipeline` profile installs into (bundle/profiles.toml omits polars; issue 22).

Uninstalling polars from the shared test venv is not an option, so this folder goes first on PYTHONPATH of a
subprocess: Python imports this `sitecustomize` at start-up, and the finder below makes every import of the
analysis and report stages' modules fail as a missing package does. It reaches the processes the subprocess
starts too (Snakemake parsing the workflow), as PYTHONPATH does.

``FAULT_BLOCK_MODULES`` (comma-separated dotted names) blocks more, e.g. a module of the measurement path itself,
to show that a check of that path fails. At exit, every name it refused is printed on stderr
(``no_analysis_extra blocked: …``): an import that a caller caught and silently worked around still shows.
"""

import atexit
import os
import sys

BLOCKED = ("polars", "altair", "jinja2", "vl_convert",
           *filter(None, os.environ.get("FAULT_BLOCK_MODULES", "").split(",")))
refused: list[str] = []


class AnalysisExtraBlocker:
    """A meta-path finder asked before the real ones: a blocked name (or a submodule of one) is missing."""

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the no_analysis_extra fault injector)",
                                      name=name)
        return None


@atexit.register
def _report() -> None:
    if refused:
        print(f"no_analysis_extra blocked: {', '.join(sorted(set(refused)))}", file=sys.stderr)


sys.meta_path.insert(0, AnalysisExtraBlocker())
