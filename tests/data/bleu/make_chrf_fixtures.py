#!/usr/bin/env python3
r"""Writes the chrF / chrF++ expectations for tests/unit/test_bleu.cpp.

Run once (needs only `pip install sacrebleu`):  python3 tests/data/bleu/make_chrf_fixtures.py
The C++ tests read the files this script writes; they never run Python.

Scores every set of expected.txt (the BLEU fixtures, written by make_fixtures.py) and one set of
its own, chrf_tricky.{hyp,ref1,ref2}: Unicode whitespace (no-break, ideographic, tab), punctuation
at a word's start, end and both, one-character words, empty lines on either side, and two
references of which the second is the better for some lines.

expected_chrf.txt: one line per set: "NAME chrF2 chrF2++", the scores as Python repr (round-trip
exact), then the hypothesis and reference files ("hyp FILE ref FILE [FILE]").
"""

import os

import sacrebleu
from sacrebleu.metrics import CHRF

HERE = os.path.dirname(os.path.abspath(__file__))


def read_lines(path):
    # As the BLEU fixtures are read: UTF-8, lines split on "\n" only.
    with open(os.path.join(HERE, path), encoding="utf-8", newline="\n") as f:
        return [line[:-1] if line.endswith("\n") else line for line in f]


def write_lines(name, lines):
    with open(os.path.join(HERE, name), "wb") as f:
        for line in lines:
            assert "\n" not in line
            f.write((line + "\n").encode("utf-8"))


def bleu_sets():
    sets, current = [], None
    for line in read_lines("expected.txt"):
        key, _, value = line.partition(" ")
        if key == "set":
            current = {"name": value, "refs": []}
            sets.append(current)
        elif key == "hyp":
            current["hyp"] = value
        elif key == "ref":
            current["refs"].append(value)
    return sets


def tricky_set():
    hyp = [
        "Ein Hund\u00a0läuft (schnell) über die Wiese.",
        "\"Hallo,\" sagte er: a b c !",
        "",
        "Zwei\u3000Männer\tsitzen auf einer Bank .",
        "(x) ,y z, ...",
        "Ein Mann fährt Fahrrad.",
        "Eine Frau liest ein Buch im Park.",
    ]
    ref1 = [
        "Ein Hund läuft schnell über die Wiese.",
        "„Hallo“, sagte er: a b c!",
        "Eine leere Hypothese.",
        "Zwei Männer sitzen auf einer Bank.",
        "",
        "Ein Mann sitzt.",
        "Eine Frau liest.",
    ]
    ref2 = [
        "Ein Hund rennt über die Wiese.",
        "Er sagte hallo.",
        "Noch eine.",
        "Zwei Frauen stehen.",
        "x y z",
        "Ein Mann fährt Fahrrad.",
        "Eine Frau liest ein Buch im Park.",
    ]
    write_lines("chrf_tricky.hyp", hyp)
    write_lines("chrf_tricky.ref1", ref1)
    write_lines("chrf_tricky.ref2", ref2)
    return {"name": "chrf_tricky", "hyp": "chrf_tricky.hyp", "refs": ["chrf_tricky.ref1", "chrf_tricky.ref2"]}


def main():
    out = [f"# sacreBLEU {sacrebleu.__version__} corpus chrF2 and chrF2++ (defaults); written by make_chrf_fixtures.py"]
    for s in bleu_sets() + [tricky_set()]:
        hyps = read_lines(s["hyp"])
        refs = [read_lines(r) for r in s["refs"]]
        chrf = CHRF(word_order=0).corpus_score(hyps, refs).score
        chrfpp = CHRF(word_order=2).corpus_score(hyps, refs).score
        out.append(f"{s['name']} {chrf!r} {chrfpp!r} hyp {s['hyp']} ref {' '.join(s['refs'])}")
    with open(os.path.join(HERE, "expected_chrf.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
