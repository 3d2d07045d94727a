#!/usr/bin/env python3
"""Checks the repository's Markdown as GitHub would render it (markdown-it-py, tables on).

Fails, naming file and line, on:
  - a table row whose cell count differs from its header's (an unescaped | in a cell splits it);
  - a relative link or image whose file does not exist, or whose #anchor names no heading there
    (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats);
  - a ```sh block in README.md that no test runs: each one must either appear line for line in
    .ci/run, or follow a comment <!-- tested by: TEST --> naming a test registered in a
    tests/**/CMakeLists.txt.
Usage: check_docs.py REPO_ROOT. Exit 77 (ctest: skipped) when markdown-it-py is missing.
"""
import os
import re
import sys
import urllib.parse

try:
    from markdown_it import MarkdownIt
except ImportError:
    print("SKIP: markdown-it-py is not installed (python3 -m pip install markdown-it-py)")
    sys.exit(77)

SKIPPED_DIRS = re.compile(r"^(build.*|\..*|checkpoints|node_modules)$")
TESTED_BY = re.compile(r"<!--\s*tested by:\s*([\w.\-]+)\s*-->")


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not SKIPPED_DIRS.match(d))
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def parser():
    return MarkdownIt("commonmark").enable("table")


def row_cells(line):
    """Cells of a table row's source: split on | that is not escaped, outer pipes dropped."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return len(re.split(r"(?<!\\)\|", text))


def heading_text(inline):
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))


def slugs(tokens):
    """GitHub's anchor of each heading."""
    seen, out = {}, set()
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open":
            continue
        slug = re.sub(r"[^\w\- ]", "", heading_text(tokens[i + 1]).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def check_tables(rel, lines, tokens, errors):
    header, in_body = 0, False
    for tok in tokens:
        if tok.type == "thead_open":
            header = 0
        elif tok.type == "th_open":
            header += 1
        elif tok.type in ("tbody_open", "tbody_close"):
            in_body = tok.type == "tbody_open"
        elif tok.type == "tr_open" and in_body:
            cells = row_cells(lines[tok.map[0]])
            if cells != header:
                errors.append(f"{rel}:{tok.map[0] + 1}: table row has {cells} cells, its header {header}")


def links(tokens):
    """(href, source line) of every link and image."""
    line = 0
    for tok in tokens:
        if tok.map:
            line = tok.map[0]
        for child in tok.children or []:
            if child.type == "link_open":
                yield child.attrs.get("href", ""), line
            elif child.type == "image":
                yield child.attrs.get("src", ""), line


def check_links(path, rel, tokens, anchors_of, errors):
    for href, line in links(tokens):
        if re.match(r"^[a-z][a-z0-9+.\-]*:", href, re.I) or href.startswith("//"):
            continue  # an absolute URL: not checked offline
        target, _, anchor = href.partition("#")
        target = urllib.parse.unquote(target)
        file = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        where = f"{rel}:{line + 1}"
        if not os.path.exists(file):
            errors.append(f"{where}: link to {href}: {target} does not exist")
        elif anchor and file.endswith(".md") and anchor not in anchors_of(file):
            errors.append(f"{where}: link to {href}: no heading with anchor #{anchor} in {target or 'this file'}")


def registered_tests(root):
    names = set()
    for folder, dirs, files in os.walk(os.path.join(root, "tests")):
        if "CMakeLists.txt" in files:
            with open(os.path.join(folder, "CMakeLists.txt"), encoding="utf-8") as f:
                text = f.read()
            names.update(re.findall(r"add_test\(\s*NAME\s+([\w.\-]+)", text))
            names.update(re.findall(r"tessera_\w*test\(\s*([\w.\-]+)", text))
    return names


def check_readme_commands(root, lines, tokens, errors):
    with open(os.path.join(root, ".ci", "run"), encoding="utf-8") as f:
        ci = set(l.strip() for l in f)
    tests = registered_tests(root)
    for tok in tokens:
        if tok.type != "fence" or tok.info.strip() not in ("sh", "bash", "shell"):
            continue
        where = f"README.md:{tok.map[0] + 1}"
        before = "\n".join(lines[max(0, tok.map[0] - 3):tok.map[0]])
        marker = TESTED_BY.findall(before)
        if marker:
            if marker[-1] not in tests:
                errors.append(f"{where}: 'tested by: {marker[-1]}' names no test in tests/**/CMakeLists.txt")
            continue
        commands = [l.strip() for l in tok.content.splitlines() if l.strip() and not l.strip().startswith("#")]
        missing = [c for c in commands if c not in ci]
        if missing:
            errors.append(f"{where}: a command block no test runs (not in .ci/run, and no "
                          f"<!-- tested by: TEST --> before it): {missing[0][:80]}")


def main(root):
    md = parser()
    parsed = {}

    def parse(path):
        if path not in parsed:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            parsed[path] = (text.splitlines(), md.parse(text))
        return parsed[path]

    def anchors_of(path):
        return slugs(parse(path)[1])

    errors = []
    files = list(markdown_files(root))
    for path in files:
        lines, tokens = parse(path)
        rel = os.path.relpath(path, root)
        check_tables(rel, lines, tokens, errors)
        check_links(path, rel, tokens, anchors_of, errors)
    readme = os.path.join(root, "README.md")
    check_readme_commands(root, *parse(readme), errors)
    for e in errors:
        print(e)
    print(f"check_docs: {len(files)} Markdown files, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")))
