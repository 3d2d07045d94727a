#!/usr/bin/env python3
"""Code limits of the product code (framework/, models/, launch/: C++ and CUDA sources).

Prints the longest functions and files, and fails (exit status 1) when
  - a function is over 100 lines or a file over 700 lines and the allowlist does not name it;
  - an allowlisted function or file is no longer over its limit (or is gone): the list only shrinks;
  - a string-keyed config lookup (cfg.integer("train.max_steps")) is outside the config code
    (framework/io/ and the schema) in a file the allowlist does not name.
Functions are measured by lizard (pip install lizard), from their first line to their last.

Allowlist (tests/limits/allowlist.txt): one entry a line, "function NAME", "file PATH" or
"lookups PATH", each followed by "# why". NAME is lizard's qualified name or its end after a '::'
("Run::train" names tessera::launch::Run::train, in whichever namespace it moves to); PATH is from
the repository root.

Usage: check_code_limits.py [--root DIR] [--allowlist FILE] [--top N]
"""
import argparse
import os
import re
import sys

try:
    import lizard
except ImportError:
    sys.exit("check_code_limits.py: needs lizard (python3 -m pip install lizard)")

MAX_FUNCTION_LINES = 100
MAX_FILE_LINES = 700
PRODUCT_FOLDERS = ("framework", "models", "launch")
SOURCE_SUFFIXES = (".cpp", ".h", ".hpp", ".cc", ".cu", ".cuh")
# A config key looked up by its name, e.g. cfg.integer("train.max_steps").
LOOKUP = re.compile(r'\.(integer|real|boolean|string)\("[a-z_]+\.[a-z_]+"')
ENTRY_KINDS = ("function", "file", "lookups")


def product_files(root):
    """The product's C++ and CUDA sources, as paths from the root, sorted."""
    found = []
    for folder in PRODUCT_FOLDERS:
        for directory, _, names in os.walk(os.path.join(root, folder)):
            for name in names:
                if name.endswith(SOURCE_SUFFIXES):
                    found.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(found)


def is_config_code(path):
    """Where string-keyed lookups belong: the config code and the schema that defines the keys."""
    return path.startswith("framework/io/") or os.path.basename(path).startswith("schema.")


def read_allowlist(path):
    """{(kind, name): line number}; a malformed line is an error naming it."""
    entries = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            kind, _, name = text.partition(" ")
            if kind not in ENTRY_KINDS or not name.strip() or "#" not in line:
                sys.exit(f"{path}:{number}: expected 'function NAME # why', 'file PATH # why' or "
                         f"'lookups PATH # why', got: {line.rstrip()}")
            entries[(kind, name.strip())] = number
    return entries


def measure(root, files):
    """(functions, file_lengths, lookups): [(lines, name, path:line)], {path: lines}, {path: [line]}."""
    functions, lengths, lookups = [], {}, {}
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as source:
            code = source.read()
        lengths[path] = code.count("\n")
        info = lizard.FileAnalyzer(lizard.get_extensions([])).analyze_source_code(path, code)
        for function in info.function_list:
            length = function.end_line - function.start_line + 1
            functions.append((length, function.name, f"{path}:{function.start_line}"))
        if not is_config_code(path):
            hits = [n for n, line in enumerate(code.split("\n"), 1) if LOOKUP.search(line)]
            if hits:
                lookups[path] = hits
    functions.sort(key=lambda f: (-f[0], f[1]))
    return functions, lengths, lookups


def print_longest(functions, lengths, top):
    print(f"Longest product functions (limit {MAX_FUNCTION_LINES} lines):")
    for length, name, where in functions[:top]:
        print(f"  {length:5d}  {name}  ({where})")
    print(f"Longest product files (limit {MAX_FILE_LINES} lines):")
    for path in sorted(lengths, key=lambda p: (-lengths[p], p))[:top]:
        print(f"  {lengths[path]:5d}  {path}")


def allowlisted_as(name, allowed):
    """The allowlist's entry that names the function, or None."""
    for kind, entry in allowed:
        if kind == "function" and (name == entry or name.endswith("::" + entry)):
            return (kind, entry)
    return None


def check(functions, lengths, lookups, allowed, allowlist_name):
    """The failures, one message each."""
    failures = []
    still_needed = set()
    for length, name, where in functions:
        if length <= MAX_FUNCTION_LINES:
            continue
        entry = allowlisted_as(name, allowed)
        if entry:
            still_needed.add(entry)
        else:
            failures.append(f"function {name} ({where}) has {length} lines, over {MAX_FUNCTION_LINES}")
    for path, length in sorted(lengths.items()):
        if length > MAX_FILE_LINES and ("file", path) not in allowed:
            failures.append(f"file {path} has {length} lines, over {MAX_FILE_LINES}")
    for path, hits in sorted(lookups.items()):
        if ("lookups", path) not in allowed:
            lines = ", ".join(str(n) for n in hits)
            failures.append(f"lookups: {path} looks config keys up by their names (lines {lines}): "
                            "read them from the typed config instead")
    still_needed |= {("file", p) for p, n in lengths.items() if n > MAX_FILE_LINES}
    still_needed |= {("lookups", p) for p in lookups}
    for entry, number in sorted(allowed.items(), key=lambda e: e[1]):
        if entry not in still_needed:
            failures.append(f"{allowlist_name}:{number}: '{entry[0]} {entry[1]}' is within the limits "
                            "now (or gone): remove the entry")
    return failures


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    parser.add_argument("--allowlist", default=os.path.join(here, "allowlist.txt"))
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    allowed = read_allowlist(args.allowlist)
    functions, lengths, lookups = measure(args.root, product_files(args.root))
    print_longest(functions, lengths, args.top)
    failures = check(functions, lengths, lookups, allowed, os.path.relpath(args.allowlist))
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        print(f"{len(failures)} failure(s); the limits and the allowlist's format: "
              "tests/limits/check_code_limits.py's first lines")
        return 1
    print(f"PASS: {len(lengths)} product files, {len(functions)} functions within the limits "
          f"or allowlisted ({len(allowed)} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
