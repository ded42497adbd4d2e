"""For benchmarks/mutation.sh: rewrite ``@check(...)``-decorated functions of a copy of checks.py as plain
functions registered after the module's body (mutmut does not mutate decorated functions). Same registry,
same order; only ever run on the scratch copy."""

import re
import sys

path = sys.argv[1]
src = open(path).read()
moved: list[str] = []


def unwrap(m: re.Match) -> str:
    moved.append(f"check({m.group(1)})({m.group(3)})")
    return m.group(2)


src = re.sub(r"^@check\((.*?)\)\n(def (\w+)\()", unwrap, src, flags=re.S | re.M)
with open(path, "w") as fh:
    fh.write(src + "\n\n# mutation harness: the registrations, in declaration order\n" + "\n".join(moved) + "\n")
print(f"{path}: {len(moved)} check registrations moved out of decorators")
