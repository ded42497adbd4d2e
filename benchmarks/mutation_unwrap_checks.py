"""For benchmarks/mutation.sh, on the scratch copy of checks.py only (never the repository's):

1. ``@check(...)``-decorated functions become plain functions registered after the module body, because
   mutmut does not mutate decorated functions. Same registry, same order.
2. Statements that build only the human-readable ``detail`` text of a check row (``detail = ...`` and the
   pieces it is made of) are put between ``# pragma: no mutate start`` and ``end``: the prose of checks.md is the report tests'
   business; the verdicts (status, value, threshold, cells) are what the mutants here change.
"""

import ast
import re
import sys

# Names a check assigns only to compose its detail text (read nowhere else in checks.py).
DETAIL_NAMES = {
    "detail",
    "detail_out",
    "joined",
    "more",
    "summary",
    "metric",
    "windows",
    "interval",
    "shift",
    "sampling",
    "short_drafts",
    "n_draws",
    "note",
    "parts",
    "shown",
    "on_host",
    "what",
}

path = sys.argv[1]
src = open(path).read()
moved: list[str] = []


def unwrap(m: re.Match) -> str:
    moved.append(f"check({m.group(1)})({m.group(3)})")
    return m.group(2)


src = re.sub(r"^@check\((.*?)\)\n(def (\w+)\()", unwrap, src, flags=re.S | re.M)
lines = src.split("\n")
spans = sorted(
    (node.lineno, node.end_lineno)
    for node in ast.walk(ast.parse(src))
    if isinstance(node, ast.Assign)
    and len(node.targets) == 1
    and isinstance(node.targets[0], ast.Name)
    and node.targets[0].id in DETAIL_NAMES
)
# mutmut's "no mutate start/end" comment lines around each such statement (a trailing comment would cover
# only one line of a statement written over several); bottom up, so earlier line numbers stay valid
for first, last in reversed(spans):
    indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
    lines.insert(last, f"{indent}# pragma: no mutate end")
    lines.insert(first - 1, f"{indent}# pragma: no mutate start")
text_lines = {n for first, last in spans for n in range(first, last + 1)}
src = "\n".join(lines)
with open(path, "w") as fh:
    fh.write(src + "\n\n# mutation harness: the registrations, in declaration order\n" + "\n".join(moved) + "\n")
print(
    f"{path}: {len(moved)} check registrations moved out of decorators; {len(text_lines)} detail-text lines not mutated"
)
