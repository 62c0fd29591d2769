#!/usr/bin/python3
"""Size limits of the project's C++ sources, as STYLE asks: no non-test
source file over 600 lines and no function over 80 lines.

Lists every offender. Prints a "PASS name" / "FAIL name" line, as the
deployment checks of tests/run_all.sh do; exits 1 if it failed.

Usage: tests/code_limits.py [--root DIR]

A function is a brace block opened after a parameter list ")" (and what may
follow it: const, override, noexcept, a trailing return type, a constructor's
initializer list) at namespace or class level; lambdas and blocks inside it
count as its lines. Its length is from the line of its "{" to the line of
its "}". Comments, string and character literals are ignored.
"""

import argparse
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
SOURCE_DIRS = ("common", "server", "worker", "deploy", "tests", "proto")


def is_test_file(path):
    """Tests and their helpers; the benchmarks under tests/bench are programs
    users run, and count."""
    if path.endswith("_test.cc"):
        return True
    return path.startswith("tests/") and not path.startswith("tests/bench/")


def strip_comments_and_literals(text):
    """The text with comments and literals blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', text[i:]):
            delim = re.match(r'R"([^(\s]*)\(', text[i:]).group(1)
            end = text.find(")" + delim + '"', i)
            j = n if end < 0 else end + len(delim) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


# What may stand between a parameter list's ")" and a function body's "{".
TAIL = re.compile(r"\)\s*(const|override|final|noexcept|mutable|&|&&|->[^{;]*|\s)*"
                  r"(:[^;{}]*(\{[^{}]*\}[^;{}]*)*)?$", re.S)


def functions(text):
    """(name, first line, last line) of every function body in `text`."""
    code = strip_comments_and_literals(text)
    found = []
    stack = []  # per open brace: (kind, name, line); kind: function, init or block
    line = 1
    start = 0  # where the text before the next brace starts
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            # The head without the initializer braces met so far (x{1}).
            # Thread-safety annotations stand between a signature and its body.
            raw = re.sub(r"\bABSL_[A-Z_]+\([^()]*\)", "", code[start:i])
            head = re.sub(r"\{[^{}]*\}", "", raw)[-2000:]
            inside = any(kind == "function" for kind, _, _ in stack)
            kind, name = "block", ""
            in_initializers = re.search(r"\)\s*(noexcept\s*)?:[^;{}]*$", head)
            if (not inside and in_initializers and
                    (re.search(r"[\w>]\s*$", raw) or head.count("(") > head.count(")"))):
                # A member's braces in a constructor's initializer list, or a
                # lambda inside one of its parentheses.
                kind = "init"
            elif (not inside and TAIL.search(head) and
                  not re.search(r"\b(if|for|while|switch|catch)\s*\([^()]*$", head) and
                  not re.search(r"\b(struct|class|enum|namespace|union)\b[^;]*$", head)):
                # A constructor's name stands before its initializer list.
                init = re.search(r"\)\s*(noexcept\s*)?:(?!:)", head)
                signature = head[:init.start() + 1] if init else head
                m = re.search(r"((?:[\w:]*operator\s*(?:\(\)|[^\s(]+))|[~\w:<>]+)\s*"
                              r"\([^()]*(\([^()]*\)[^()]*)*\)[^()]*$", signature)
                if m:
                    kind, name = "function", m.group(1)
            stack.append((kind, name, line))
            if kind != "init":
                start = i + 1
        elif c == "}":
            if stack:
                kind, name, first = stack.pop()
                if kind == "function":
                    found.append((name, first, line))
                if kind == "init":
                    continue
            start = i + 1
        elif c == ";" and not (stack and stack[-1][0] == "init"):
            start = i + 1
    return found


def sources(root):
    listed = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                             "--exclude-standard", *SOURCE_DIRS],
                            capture_output=True, text=True, check=True).stdout.split()
    return sorted(p for p in listed if p.endswith((".cc", ".h", ".cu", ".inc")))


def offenders(root):
    """Offences as "path" (file) and "path:function" keys, with a description."""
    found = {}
    for path in sources(root):
        if is_test_file(path) or path.endswith(".inc"):
            continue  # tests and generated reference tables
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            found[path] = f"{path}: {lines} lines (limit {MAX_FILE_LINES})"
        found_here = functions(text)
        names = [name for name, _, _ in found_here]
        for k, (name, first, last) in enumerate(found_here):
            length = last - first + 1
            if length > MAX_FUNCTION_LINES:
                # Functions of one name in a file (overloads) are told apart
                # by their order, so that a known one hides no other.
                nth = names[:k + 1].count(name)
                key = f"{path}:{name}" if names.count(name) == 1 else f"{path}:{name}#{nth}"
                found[key] = (f"{path}:{first}: {name} is {length} lines "
                              f"(limit {MAX_FUNCTION_LINES})")
    return found


SELF_TEST = r"""
namespace x {
struct S { int a{1}; };
int Add(int a, int b) const {
  if (a > b) { return a; }
  auto f = [&](int c) { return c + 1; };
  const char* s = "}{";  // }
  return f(a) + b;
}
S::S(int v) : member_(v), other_{v} {
  /* { */
}
T& T::operator=(T&& other) {
  if (this != &other) { swap(other); }
  return *this;
}
int Locked(int a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
  return a;
}
W::W() : thread_([this] { Loop(); }) {
  Start();
}
}  // namespace x
"""


def self_test():
    """The function finder on a known snippet: what it must find and skip."""
    got = [(name, first, last) for name, first, last in functions(SELF_TEST)]
    want = [("Add", 4, 9), ("S::S", 10, 12), ("T::operator=", 13, 16), ("Locked", 17, 19),
            ("W::W", 20, 22)]
    if got != want:
        raise AssertionError(f"functions() found {got}, expected {want}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args()
    self_test()
    found = offenders(args.root)
    for key in sorted(found):
        print(found[key])
    if found:
        print(f"FAIL code limits: {len(found)} offenders: {', '.join(sorted(found))}")
        return 1
    print(f"PASS code limits: no file over {MAX_FILE_LINES} lines or function over "
          f"{MAX_FUNCTION_LINES} lines")
    return 0

if __name__ == "__main__":
    sys.exit(main())
