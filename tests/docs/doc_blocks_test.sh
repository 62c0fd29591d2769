#!/usr/bin/env bash
# //tests:doc_blocks_test: the runnable shell blocks of README.md and docs/
# run as written (run_doc_blocks.py), with the binaries installed the way a
# user installs them (//deploy:install) and put on PATH.
set -euo pipefail
prefix="$TEST_TMPDIR/prefix"
deploy/install "$prefix" >/dev/null
exec /usr/bin/python3 tests/docs/run_doc_blocks.py --root . --bin_dir "$prefix/bin"
