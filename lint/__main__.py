"""``python -m lint [check ...]``: run the code-base checks, print problems by check, exit 1 if any."""

from __future__ import annotations

import sys

from lint import run


def main(argv: list[str]) -> int:
    """Run the checks named in ``argv`` (all of them when empty); 1 when any finds a problem."""
    results = run(argv or None)
    failed = 0
    for name, problems in results.items():
        if problems:
            failed += 1
            print(f"== lint {name}: {len(problems)} problem(s)")
            for problem in problems:
                print(f"  {problem}")
        else:
            print(f"== lint {name}: clean")
    if failed:
        print(f"lint: {failed} of {len(results)} checks found problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
