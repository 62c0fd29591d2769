"""Checks README.md and docs/*.md against the repository and the binaries.

Usage: check_docs.py --root DIR --bin NAME=PATH [--bin NAME=PATH]... [FILE.md]...

- Every relative link (and image) resolves to a file or folder inside the
  repository that git does not ignore, and a #anchor to a heading of the
  target page. No path in the text, linked or not, climbs out of the
  repository.
- Every --flag named for a psync binary is in that binary's --help: in a
  shell block, the flags after the binary's name up to the end of its
  command; in an inline code span, the same when the span names a binary,
  and a span that is only a flag (`--lr=0.05`) must be some binary's.

Prints one line per problem as FILE:LINE: what, and exits 1 if there is
any. Writes a JUnit XML file (one case per page and check) where Bazel asks
for one (XML_OUTPUT_FILE). Standard library only.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_markdown  # noqa: E402

FLAG = re.compile(r"^--([a-z][a-z0-9_]*)")
# The flag lines of psync's --help (absl's format): "    --name (text); default: ...".
HELP_FLAG = re.compile(r"^\s+--([a-z][a-z0-9_]*)\b", re.M)
# What every binary takes besides the flags its --help lists (common/config/flags_help.h).
HELP = {"help", "helpfull", "helpshort"}
# Where a command ends, in a shell line split into words.
COMMAND_END = {"|", "||", "&", "&&", ";", ";;", "(", ")", "do", "then", "else", "{", "}"}


def help_flags(path):
    """The flags a binary's --help lists."""
    run = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=30)
    flags = set(HELP_FLAG.findall(run.stdout))
    if run.returncode != 0 or not flags:
        raise SystemExit(f"{path} --help exited {run.returncode} listing {len(flags)} flags:\n"
                         f"{run.stdout[-2000:]}")
    return flags | HELP


def words(command):
    """A shell command's words; punctuation (| && ; ...) as words of their own."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        return list(lexer)
    except ValueError:  # unbalanced quotes: a rough split is enough here
        return command.replace(";", " ; ").replace("|", " | ").replace("&", " & ").split()


def flag_uses(command, binaries):
    """(binary, flag) for each --flag that follows a binary's name in
    `command`, up to the end of that binary's command."""
    uses, current = [], None
    for word in words(command):
        name = word.rsplit("/", 1)[-1]
        if name in binaries:
            current = name
        elif word in COMMAND_END:
            current = None
        elif current:
            m = FLAG.match(word)
            if m:
                uses.append((current, m.group(1)))
    return uses


def shell_commands(block):
    """(line offset, command) of a shell block: comments and here-documents
    dropped, continued lines joined."""
    commands, pending, start, heredoc = [], "", 0, None
    for i, line in enumerate(block.text.split("\n")):
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*(['\"]?)(\w+)\1", line)
        if m:
            heredoc = m.group(2)
        code = re.sub(r"(^|\s)#.*$", "", line)
        if not pending:
            start = i
        if code.rstrip().endswith("\\"):
            pending += code.rstrip()[:-1] + " "
            continue
        commands.append((start, pending + code))
        pending = ""
    if pending:
        commands.append((start, pending))
    return commands


def strip_value(flag):
    return flag.split("=", 1)[0]


def known(binary, flag, helps):
    flags = helps[binary]
    return flag in flags or (flag.startswith("no") and flag[2:] in flags)


def check_flags(path, text, helps):
    problems = []
    everything = set().union(*helps.values())
    blocks, prose = doc_markdown.split(text)
    for block in blocks:
        if not block.shell:
            continue
        for offset, command in shell_commands(block):
            for binary, flag in flag_uses(command, helps):
                if not known(binary, flag, helps):
                    problems.append(f"{path}:{block.line + 1 + offset}: --{flag} is not in "
                                    f"{binary} --help")
    for line, span in doc_markdown.inline_code(prose):
        uses = flag_uses(span, helps)
        for binary, flag in uses:
            if not known(binary, flag, helps):
                problems.append(f"{path}:{line}: --{flag} is not in {binary} --help "
                                f"(in `{span}`)")
        m = FLAG.match(span)
        if not uses and m and m.group(1) not in everything and \
                not (m.group(1).startswith("no") and m.group(1)[2:] in everything):
            problems.append(f"{path}:{line}: --{m.group(1)} is not a flag of any psync binary "
                            f"(in `{span}`)")
    return problems


def tracked(root):
    """Files git has or would add (not ignored), or None where git cannot say."""
    try:
        run = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if run.returncode != 0:
        return None
    return {p.decode() for p in run.stdout.split(b"\0") if p}


def check_links(path, text, root, files):
    problems = []
    _, prose = doc_markdown.split(text)
    here = os.path.dirname(os.path.join(root, path))
    # A path named in the text, linked or not, that climbs out of the
    # repository: a clone would not have it.
    for m in re.finditer(r"(?<![\w./])((?:\.\./)+)[\w.-]+", prose):
        full = os.path.normpath(os.path.join(here, m.group(0)))
        if os.path.relpath(full, root).startswith(".."):
            line = prose.count("\n", 0, m.start()) + 1
            problems.append(f"{path}:{line}: {m.group(0)} is outside the repository")
    for line, target in doc_markdown.links(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(here, file_part)) if file_part else \
            os.path.join(root, path)
        rel = os.path.relpath(full, root)
        if file_part.startswith("/") or rel == ".." or rel.startswith("../"):
            problems.append(f"{path}:{line}: link {target} points outside the repository")
            continue
        if not os.path.exists(full):
            problems.append(f"{path}:{line}: link {target}: {rel} does not exist")
            continue
        if files is not None and os.path.isfile(full) and rel not in files:
            problems.append(f"{path}:{line}: link {target}: {rel} is ignored by git, so a "
                            "clone lacks it")
            continue
        if anchor:
            if not full.endswith(".md"):
                problems.append(f"{path}:{line}: link {target}: an anchor into a file that is "
                                "not Markdown")
            elif anchor not in doc_markdown.anchors(open(full, encoding="utf-8").read()):
                problems.append(f"{path}:{line}: link {target}: {rel} has no heading "
                                f"#{anchor}")
    return problems


def write_xml(cases):
    out = os.environ.get("XML_OUTPUT_FILE")
    if not out:
        return
    suite = ET.Element("testsuite", name="doc_links_test", tests=str(len(cases)),
                       failures=str(sum(1 for _, p in cases if p)))
    for name, problems in cases:
        case = ET.SubElement(suite, "testcase", name=name, classname="docs")
        if problems:
            ET.SubElement(case, "failure", message=f"{len(problems)} problems").text = \
                "\n".join(problems)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True, help="the repository's root")
    parser.add_argument("--bin", action="append", default=[], help="NAME=PATH of a binary")
    parser.add_argument("pages", nargs="*", help="pages relative to --root "
                        "(default: README.md and docs/*.md)")
    args = parser.parse_args()
    root = os.path.realpath(args.root)
    helps = {}
    for spec in args.bin:
        name, _, path = spec.partition("=")
        helps[name] = help_flags(path)
    pages = args.pages or ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    files = tracked(root)
    if files is None:
        print("note: git cannot list the repository's files; links are checked for "
              "existence only")
    cases, total = [], 0
    for page in pages:
        text = open(os.path.join(root, page), encoding="utf-8").read()
        for check, problems in (("links", check_links(page, text, root, files)),
                                ("flags", check_flags(page, text, helps))):
            cases.append((f"{page} {check}", problems))
            total += len(problems)
            for p in problems:
                print(p)
    write_xml(cases)
    print(f"{len(pages)} pages, {total} problems")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
