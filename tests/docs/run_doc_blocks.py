"""Runs the shell blocks of README.md and docs/*.md marked runnable.

Usage: run_doc_blocks.py --root DIR --bin_dir DIR [--timeout_s N] [FILE.md]...

A block is runnable when its fence opens with ```sh runnable (or ```bash
runnable). Each page's blocks run in order in one scratch folder of their
own, as a reader would type them: each block with bash -euo pipefail, the
binaries of --bin_dir first on PATH, in a process group of its own, within
--timeout_s. A block fails when it exits non-zero, runs past its time, or
leaves processes running; the failure names the page and the line of the
block's fence, with the end of its output.

Where the system allows it (unshare, iproute2), every block runs in a
network namespace of its own, so that the fixed ports a guide shows
(7070, ...) cannot meet another program's. Writes a JUnit XML file (one
case per block) where Bazel asks for one (XML_OUTPUT_FILE). Standard
library only.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_markdown  # noqa: E402

# Brings up loopback in a fresh network namespace, then runs the block.
NETNS_PRELUDE = ["unshare", "--user", "--map-root-user", "--net", "--",
                 "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def netns_works():
    try:
        return subprocess.run(NETNS_PRELUDE + ["true"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(proc):
    """Ends what is left of a block's process group (the block's shell is its
    leader): SIGTERM, then SIGKILL after 5 s. Returns whether anything was
    left."""
    proc.poll()  # a leader that has exited must not count as alive
    if not group_alive(proc.pid):
        return False
    os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        proc.poll()
        if not group_alive(proc.pid):
            return True
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return True


def run_block(block, folder, env, timeout_s, netns):
    """Runs one block; returns (ok, seconds, output, why)."""
    script = os.path.join(folder, f".block-{block.line}.sh")
    with open(script, "w") as f:
        f.write(block.text)
    argv = (NETNS_PRELUDE if netns else []) + ["bash", "-euo", "pipefail", script]
    start = time.monotonic()
    # Output goes to a file, not a pipe: a process the block leaves behind
    # would hold a pipe open, and the block would seem to run on.
    with tempfile.TemporaryFile(dir=folder) as out:
        proc = subprocess.Popen(argv, cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        why = None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            why = f"still running after {timeout_s} s"
        seconds = time.monotonic() - start
        if why is None and proc.returncode != 0:
            why = f"exited with code {proc.returncode}"
        if stop_group(proc) and why is None:
            why = "left processes running (a guide's commands must stop what they start)"
        out.seek(0)
        output = out.read().decode(errors="replace")
    os.unlink(script)
    return why is None, seconds, output, why


def write_xml(results):
    out = os.environ.get("XML_OUTPUT_FILE")
    if not out:
        return
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="doc_blocks_test", tests=str(len(results)),
                          failures=str(sum(1 for r in results if not r[1])))
    for name, ok, seconds, detail in results:
        case = ET.SubElement(suite, "testcase", name=name, classname="docs",
                             time=f"{seconds:.1f}")
        if not ok:
            ET.SubElement(case, "failure", message=detail.split("\n")[0]).text = detail
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True, help="the repository's root")
    parser.add_argument("--bin_dir", required=True, help="the installed psync binaries")
    parser.add_argument("--timeout_s", type=int, default=90, help="limit of one block")
    parser.add_argument("--scratch", default=os.environ.get("TEST_TMPDIR"),
                        help="where the pages' scratch folders go (default: a temporary one)")
    parser.add_argument("pages", nargs="*", help="pages relative to --root "
                        "(default: README.md and docs/*.md)")
    args = parser.parse_args()
    root = args.root
    pages = args.pages or ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    scratch = tempfile.mkdtemp(prefix="doc_blocks.", dir=args.scratch)
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(args.bin_dir) + os.pathsep + env.get(
        "PATH", "/usr/local/bin:/usr/bin:/bin")
    netns = netns_works()
    print("blocks run in network namespaces of their own" if netns else
          "note: no network namespace here (unshare or ip missing or not allowed); blocks "
          "share the host's network")
    results, failed = [], 0
    for page in pages:
        blocks, _ = doc_markdown.split(open(os.path.join(root, page), encoding="utf-8").read())
        folder = os.path.join(scratch, page.replace("/", "_"))
        os.makedirs(folder, exist_ok=True)
        for block in (b for b in blocks if b.runnable):
            name = f"{page}:{block.line}"
            ok, seconds, output, why = run_block(block, folder, env, args.timeout_s, netns)
            print(f"{'ok  ' if ok else 'FAIL'} {name} ({seconds:.1f} s)", flush=True)
            detail = ""
            if not ok:
                failed += 1
                tail = "\n".join(output.rstrip().split("\n")[-40:])
                detail = f"{name}: the block {why}; the end of its output:\n{tail}"
                print(detail + "\n", flush=True)
            results.append((name, ok, seconds, detail))
    write_xml(results)
    print(f"{len(results)} runnable blocks, {failed} failed")
    if not results:
        print("no runnable blocks found: expected ```sh runnable fences")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
