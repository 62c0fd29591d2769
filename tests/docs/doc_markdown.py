"""What the documentation tests read from Markdown: fenced blocks, inline
code spans, links and heading anchors (GitHub's rules, as far as psync's
pages use them). Standard library only.
"""
import re

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


class Block:
    """A fenced code block: its info string's words, its text, and the
    1-based line of its opening fence."""

    def __init__(self, info, text, line):
        self.info = info.split()
        self.lang = self.info[0] if self.info else ""
        self.text = text
        self.line = line

    @property
    def runnable(self):
        return self.lang in ("sh", "bash") and "runnable" in self.info[1:]

    @property
    def shell(self):
        return self.lang in ("sh", "bash", "shell", "console")


def split(text):
    """Returns (blocks, prose): the fenced blocks, and the text with every
    fenced block's lines blanked (so prose offsets keep their lines)."""
    blocks, prose = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        fence, info, start = m.group(2), m.group(3).strip(), i
        body = []
        i += 1
        while i < len(lines):
            close = FENCE.match(lines[i])
            if close and close.group(2)[0] == fence[0] and len(close.group(2)) >= len(fence) \
                    and not close.group(3).strip():
                break
            body.append(lines[i])
            i += 1
        blocks.append(Block(info, "\n".join(body) + "\n", start + 1))
        prose.extend([""] * (i - start + 1))
        i += 1
    return blocks, "\n".join(prose)


INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def inline_code(prose):
    """(line, text) of every inline code span of `prose`, a span's line
    breaks read as spaces."""
    spans = []
    for m in INLINE.finditer(prose):
        line = prose.count("\n", 0, m.start()) + 1
        spans.append((line, " ".join(m.group(2).split())))
    return spans


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(prose):
    """(line, target) of every inline link and image outside code."""
    without_code = INLINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    return [(without_code.count("\n", 0, m.start()) + 1, m.group(1))
            for m in LINK.finditer(without_code)]


HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def anchors(text):
    """The anchors GitHub gives the headings of a page."""
    _, prose = split(text)
    seen, result = {}, set()
    for line in prose.split("\n"):
        m = HEADING.match(line)
        if not m:
            continue
        title = re.sub(r"`|\*\*|__", "", m.group(1))
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result
