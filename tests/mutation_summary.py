"""`make mutate`'s last step: the killed share per mutated module, from mutmut's results.

    python -m tests.mutation_summary [--mutmut PATH] [--survivors]

Reads `mutmut results --all true` (one `name: status` line per mutant; the name is the
module, then `x_<function>` or `xǁ<class>ǁ<method>`, then `__mutmut_<n>`), prints one
markdown row per module (the table in docs/benchmarks.md) and, with --survivors, the
mutants that were not killed, for a test or a line in docs/decisions.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter, defaultdict

# mutmut's statuses that count as killed: the tests failed, hung or crashed
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
_NAME = re.compile(r"^(?P<module>[\w.]+?)\.x(?:_|ǁ)")


def parse(lines: list[str]) -> dict[str, Counter]:
    """Module -> Counter of statuses, from `mutmut results --all true` lines."""
    per_module: dict[str, Counter] = defaultdict(Counter)
    for line in lines:
        name, sep, status = line.strip().rpartition(": ")
        match = _NAME.match(name)
        if sep and match:
            per_module[match["module"]][status] += 1
    return dict(per_module)


def table(per_module: dict[str, Counter]) -> str:
    rows = ["| module | mutants | killed | survived | no test | not checked | killed share |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for module, counts in sorted(per_module.items()):
        total = sum(counts.values())
        killed = sum(counts[s] for s in KILLED)
        checked = total - counts["not checked"]
        share = f"{killed / checked:.1%}" if checked else "n/a"
        rows.append(f"| {module} | {total} | {killed} | {counts['survived']} | "
                    f"{counts['no tests']} | {counts['not checked']} | {share} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutmut", default="mutmut", help="the mutmut executable")
    parser.add_argument("--survivors", action="store_true",
                        help="also list every mutant not killed")
    args = parser.parse_args(argv)
    out = subprocess.run([args.mutmut, "results", "--all", "true"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    print(table(parse(out)))
    if args.survivors:
        for line in out:
            status = line.rpartition(": ")[2]
            if _NAME.match(line.strip()) and status not in KILLED | {"not checked"}:
                print(line.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
