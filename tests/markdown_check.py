#!/usr/bin/env python3
"""Fails when a Markdown file of the repository shows what a C++ formatter does to prose.

clang-format run over README.md once turned `dlrm local --resume-from` into
`dlrm local-- resume - from`, `# dlrm: ...` into `#dlrm : ...` and a code fence's first command
into its language tag, and the docs shipped that way for a session. Usage:
markdown_check.py REPO_ROOT
"""

import pathlib
import re
import sys

SKIP = {"build", "build-asan", "build-tsan", ".git", "node_modules"}
CHECKS = [
    # `train-- config`, `local-- resume - from`: a flag's dashes torn from it.
    (re.compile(r"[A-Za-z0-9]-- [A-Za-z]"), "a flag torn apart ('x-- y')"),
    # ```sh build / bin / dlrm ...: a command pulled onto the fence line.
    (re.compile(r"^```[A-Za-z]+ \S"), "text on a code fence's line"),
]


def main(root):
    problems = []
    for path in sorted(pathlib.Path(root).rglob("*.md")):
        if SKIP.intersection(path.relative_to(root).parts):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        first = next((line for line in lines if line.strip()), "")
        if first.startswith("#") and not first.startswith("# "):
            problems.append(f"{path}:1: heading without a space after '#': {first[:60]}")
        for number, line in enumerate(lines, 1):
            for pattern, what in CHECKS:
                if pattern.search(line):
                    problems.append(f"{path}:{number}: {what}: {line.strip()[:80]}")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
