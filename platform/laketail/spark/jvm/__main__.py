"""``python -m laketail.spark.jvm build``: compile laketail's Spark classes into the jar
(``make install`` runs it). Without a JDK it prints why and exits 0: laketail works without
the jar, with SQL views bounded by the follower's interval instead of fresh per query. A
javac error is a bug and exits 1."""

from __future__ import annotations

import sys

from laketail.spark.jvm import BuildError, JavacMissing, build


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print("usage: python -m laketail.spark.jvm build", file=sys.stderr)
        return 2
    try:
        out = build()
    except JavacMissing as exc:
        print(f"laketail: the Spark jar was not built: {exc}\n"
              "laketail: register_topics falls back to views a follower thread re-makes (not fresh per query)",
              file=sys.stderr)
        return 0
    except BuildError as exc:
        print(f"laketail: building the Spark jar failed: {exc}", file=sys.stderr)
        return 1
    print(f"laketail: built {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
