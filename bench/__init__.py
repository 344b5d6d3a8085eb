"""laketail's benchmarks (issue 6): every figure a ratio against a baseline measured in
the same run on the same machine. See bench/README.md; run with ``make bench``."""
