"""For benchmarks/mutation.sh: one summary line per module, then every mutant of the subset not killed.

Counts come from mutmut's own record of the run (mutants/<source>.meta), restricted to the mutated subset
(FUNCS globs): "not reached" are mutants of the subset the time limit left unrun; mutants outside the subset
are only counted, apart."""

import fnmatch
import json
import sys
from collections import Counter

from mutmut.stats import status_by_exit_code

meta_path, mod, src, secs, rc, tests, funcs, *note = sys.argv[1:]
try:
    codes = json.load(open(meta_path))["exit_code_by_key"]
except OSError:
    print(f"{mod}: no result (mutmut exit {rc}); see {mod}.log")
    raise SystemExit from None
globs = funcs.split() if funcs != "every function" else ["*"]
subset = {k: v for k, v in codes.items() if any(fnmatch.fnmatch(k, g) for g in globs)}
status = Counter(status_by_exit_code[v] for v in subset.values())
done = sum(n for s, n in status.items() if s != "not checked")
killed = status["killed"] + status["timeout"]
score = 100.0 * killed / done if done else float("nan")
names = "every function" if globs == ["*"] else " ".join(g.rsplit(".", 1)[-1].removesuffix("__*") for g in globs)
print(
    f"{mod} ({src}): {status['killed']} killed, {status['survived']} survived, {status['no tests']} no tests, "
    f"{status['timeout']} timeout, {status['suspicious']} suspicious, {status['not checked']} not reached; "
    f"score {score:.1f} % of {done} run in {secs} s; mutated: {names} ({len(subset)} of {len(codes)} mutants); "
    f"tests: {tests}" + (f" ({note[0]})" if note and note[0] else "")
)
for k, v in sorted(subset.items()):
    if status_by_exit_code[v] not in ("killed", "timeout", "not checked"):
        print(f"    {k}: {status_by_exit_code[v]}")
