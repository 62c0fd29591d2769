#!/usr/bin/env bash
# //tests:doc_links_test: README.md and docs/ link only to files of this
# repository, and name only flags the binaries have (check_docs.py). Links
# are checked against the checkout the pages come from (their runfiles are
# links into it), since a page may link to any file of the repository.
set -euo pipefail
root=$(dirname "$(readlink -f README.md)")
exec /usr/bin/python3 tests/docs/check_docs.py --root "$root" \
  --bin psync_server=server/psync_server \
  --bin psync_worker=worker/psync_worker \
  --bin psync_launch=deploy/local/psync_launch \
  --bin psync_ctl=server/psync_ctl \
  --bin psync_ckpt=server/psync_ckpt \
  --bin psync_bench=tests/bench/psync_bench
