"""For benchmarks/mutation.sh: one summary line per module from mutmut's CI stats, then the mutants not killed."""

import json
import sys

stats_path, mod, src, secs, rc, tests, funcs, survivors = sys.argv[1:]
try:
    s = json.load(open(stats_path))
except OSError:
    print(f"{mod}: no result (mutmut exit {rc}); see {mod}.log")
    raise SystemExit
done = s["killed"] + s["survived"] + s["timeout"] + s["no_tests"] + s["suspicious"] + s["segfault"]
score = 100.0 * (s["killed"] + s["timeout"]) / done if done else float("nan")
print(f"{mod} ({src}; {funcs}): {s['killed']} killed, {s['survived']} survived, {s['no_tests']} no tests, "
      f"{s['timeout']} timeout, {s['suspicious']} suspicious, {s['total'] - done} not run; "
      f"score {score:.1f} % in {secs} s (tests: {tests})")
print(open(survivors).read(), end="")
