"""Counts test cases from Bazel's test.xml files for the targets in a log.

Usage: count_results.py BAZEL_TEST_LOG TESTLOGS_DIR [NAME PASSED|FAILED]...
Prints the per-target table and a last line "N passed, N failed"; exits 1
if anything failed. Each NAME RESULT pair after the first two arguments is
one more checked item (such as a build in another configuration). A target that failed without a failing test case in its
XML (a crash, a timeout, a build failure) counts as one failure.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(r"^(//\S+)\s+(?:\(cached\) )?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|"
                    r"FAILED TO BUILD|INCOMPLETE|SKIPPED)\b")


def count_xml(path):
    passed = failed = 0
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            continue
        else:
            passed += 1
    return passed, failed


def main():
    log, testlogs = sys.argv[1], sys.argv[2]
    passed = failed = 0
    for line in open(log, errors="replace"):
        m = STATUS.match(line.strip())
        if not m:
            continue
        target, status = m.group(1), m.group(2)
        xml = os.path.join(testlogs, target[2:].replace(":", "/"), "test.xml")
        p = f = 0
        if os.path.exists(xml) and status not in ("FAILED TO BUILD", "NO STATUS"):
            try:
                p, f = count_xml(xml)
            except ET.ParseError:
                f = 1
        if status not in ("PASSED", "FLAKY") and f == 0:
            f = 1
        print(f"{target}: {status} ({p} passed, {f} failed)")
        passed += p
        failed += f
    extra = sys.argv[3:]
    for name, result in zip(extra[::2], extra[1::2]):
        print(f"{name}: {result}")
        if result == "PASSED":
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
