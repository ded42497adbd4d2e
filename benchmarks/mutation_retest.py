"""For benchmarks/mutation.sh with MUTATION_RETEST=1: after tests were added, run again only the mutants of the
mutated subset that the last run did not kill (survived, no tests, suspicious, not reached).

Adding tests cannot revive a killed mutant (each mutant runs the tests that call its function; more tests can
only fail more often), so the killed and timed-out verdicts of the last run stand and only the rest is re-run.
This script sets those verdicts back to "not checked" in mutmut's record (mutants/<source>.meta) and prints
their names for `mutmut run`, which then collects the new tests' coverage and runs only the named mutants."""

import fnmatch
import json
import sys

from mutmut.stats import status_by_exit_code

meta_path, funcs = sys.argv[1:]
globs = funcs.split() if funcs != "every function" else ["*"]
meta = json.load(open(meta_path))
codes = meta["exit_code_by_key"]
again = sorted(
    k
    for k, v in codes.items()
    if any(fnmatch.fnmatch(k, g) for g in globs) and status_by_exit_code[v] not in ("killed", "timeout")
)
for k in again:
    codes[k] = None
with open(meta_path, "w") as fh:
    json.dump(meta, fh, indent=4)
print(" ".join(again))
