#!/usr/bin/env python3
r"""Writes the BLEU / 13a tokenizer fixtures for tests/unit/test_bleu.cpp.

Run once (needs only `pip install sacrebleu`):  python3 tests/data/bleu/make_fixtures.py
The C++ tests read the files this script writes; they never run Python.

Files written next to this script:
  <set>.hyp, <set>.ref[1|2]  UTF-8 text, one segment per line ("\n"; crlf.hyp uses "\r\n")
  expected.txt               sacreBLEU's corpus score of every set (format below)
  tokenize_13a.txt           "<escaped input>\t<escaped 13a tokenization>" per line, for tricky
                             lines and every line of every fixture file
expected.txt: one block per set, blank line between blocks, "key value" lines:
  set NAME / hyp FILE / ref FILE (one line per reference set) / score / precisions (4) /
  counts (4) / totals (4) / bp / ratio / hyp_len / ref_len / summary (rest of the line)
Floats are Python repr (round-trip exact). Escapes in tokenize_13a.txt: "\\" for a backslash,
"\xHH" for bytes < 0x20 and 0x7f; everything else is literal UTF-8.
The references come from the Multi30k 2016 Flickr test set (German and French), first lines;
hypotheses are deterministic perturbations (random.Random with fixed seeds).
"""

import os
import random
import sys

import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

HERE = os.path.dirname(os.path.abspath(__file__))
MULTI30K = os.environ.get("MULTI30K_DIR", "/work/shared/data/multi30k")


def read_lines(path):
    # As sacreBLEU's command line reads files: UTF-8, lines split on "\n" only.
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line[:-1] if line.endswith("\n") else line for line in f]


def write_lines(name, lines, eol="\n"):
    with open(os.path.join(HERE, name), "wb") as f:
        for line in lines:
            assert "\n" not in line
            f.write((line + eol).encode("utf-8"))


def perturb(line, rng, vocab, strength):
    words = line.split()
    out = []
    for w in words:
        r = rng.random()
        if r < 0.10 * strength:
            continue  # drop
        if r < 0.20 * strength:
            out.append(rng.choice(vocab))  # replace
            continue
        if r < 0.24 * strength:
            out.append(w.lower() if w[:1].isupper() else w.capitalize())  # case change
            continue
        out.append(w)
        if rng.random() < 0.05 * strength:
            out.append(rng.choice(vocab))  # insert
    for _ in range(int(rng.random() < 0.5 * strength)):
        if len(out) > 2:
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1], out[i]  # swap neighbours
    if out and rng.random() < 0.2 * strength:
        out[-1] = out[-1].rstrip(".")  # lose the final period
    return " ".join(out)


PUNCT_REF = [
    "Das Haus kostet 1,250,000.50 Dollar, sagte er.",
    "Am 3.10.2023 um 14:30 Uhr begann die Sitzung.",
    "Die Zahl Pi ist etwa 3.14159; e ist etwa 2.71828.",
    "Der 5-jährige Junge spielt mit einem well-known Spielzeug.",
    "Von 1990-2000 lebte sie in Berlin -- und dann in Paris.",
    "Er sagte: &quot;Ich komme morgen&quot;, aber er kam nicht.",
    "AT&amp;T und Procter &amp; Gamble sind Firmen.",
    "Die Bedingung lautet x &lt; 5 &amp;&amp; y &gt; 3.",
    "Was?! Wirklich?! Das ist ja... unglaublich!!!",
    "Preise: $5.99, $10.00 und $1,000 (inkl. MwSt.).",
    "Siehe http://www.example.com/path?q=1&r=2 für Details.",
    "Die E-Mail-Adresse ist max.mustermann@example.com.",
    "Temperaturen von -5 bis +10 Grad; 50% Regen.",
    "Das Verhältnis ist 3:2, also 60/40.",
    "Er rief \"Hallo!\" und sie antwortete 'Hi'.",
    "{a: 1, b: [2, 3]} ist ein JSON-Objekt.",
    "Kapitel 1.2.3 beschreibt die U.S.A. und die U.K.",
    "Die Werte waren 0.5, .5, 5. und 5,0.",
    "Der Zug fährt um 9-10 Uhr, Gleis 3-4.",
    "Backslash \\ und Pipe | und Tilde ~ und Caret ^.",
    "Ein_Wort_mit_Unterstrichen und `Backticks`.",
    "Es war - wie immer - zu spät.",
    "Das Spiel endete 2-1 nach Verlängerung.",
    "<skipped> Dieser Satz hatte einen übersprungenen Anfang.",
]

PUNCT_HYP = [
    "Das Haus kostet 1,250,000.50 Dollar, sagte sie.",
    "Am 3.10.2023 um 14:30 begann die Sitzung.",
    "Die Zahl Pi ist ungefähr 3.14159 ; e ist etwa 2.71828.",
    "Der 5-jährige Junge spielt mit einem bekannten Spielzeug.",
    "Von 1990 - 2000 lebte sie in Berlin - und dann in Paris.",
    "Er sagte: \"Ich komme morgen\", aber er kam nicht.",
    "AT&T und Procter & Gamble sind Unternehmen.",
    "Die Bedingung lautet x < 5 && y > 3.",
    "Was ?! Wirklich? Das ist ja ... unglaublich!",
    "Preise: $5.99, $10.00 und $1.000 (inkl. MwSt.)",
    "Siehe http://www.example.com/path?q=1&amp;r=2 für Details.",
    "Die E-Mail ist max.mustermann@example.com.",
    "Temperaturen von - 5 bis +10 Grad ; 50 % Regen.",
    "Das Verhältnis ist 3:2 , also 60 / 40.",
    "Er rief &quot;Hallo!&quot; und sie antwortete 'Hi' .",
    "{a: 1, b: [2,3]} ist ein JSON Objekt.",
    "Kapitel 1.2.3 beschreibt die USA und das U.K.",
    "Die Werte waren 0.5, 0.5, 5 und 5,0.",
    "Der Zug fährt um 9 - 10 Uhr, Gleis 3-4.",
    "Backslash \\ und Pipe | und Tilde ~ und Caret ^",
    "Ein Wort mit Unterstrichen und `Backticks` .",
    "Es war -wie immer- zu spät.",
    "Das Spiel endete 2:1 nach Verlängerung.",
    "Dieser Satz hatte einen <skipped> übersprungenen Anfang.",
]

UNICODE_REF = [
    "Die Straße ist schön und grün, oder?",
    "Fünf Mädchen überqueren die Brücke über den Fluß.",
    "L'élève a réussi l'examen à Noël, n'est-ce pas ?",
    "« Bonjour », dit-il — puis il s'en alla…",
    "東京は日本の首都です。",
    "我喜欢吃苹果, 你呢?",
    "Das Wetter ist 😀 heute, wirklich 👍.",
    "„Guten Morgen“, sagte die Großmutter.",
    "Ça coûte 12,50 € – trop cher !",
    "Ελληνικά: Καλημέρα κόσμε.",
    "Русский текст: Привет, мир.",
    "Zahlen: ١٢٣.٤ und ５.５ und ²³.",
    "Naïve café, façade, cœur, œuvre.",
    "Geschützte Leerzeichen:\u00a0hier und\u202fdort, auch\u3000so.",
    "Ein\u2009schmales\u2009Leerzeichen und ein\u200bNullbreiten-Zeichen.",
]

UNICODE_HYP = [
    "Die Strasse ist schön und grün , oder?",
    "Fünf Mädchen überqueren die Brücke über den Fluss.",
    "L'élève a réussi l'examen à Noël, n'est-ce pas?",
    "« Bonjour » , dit-il - puis il s'en alla...",
    "東京は日本の首都です.",
    "我喜欢吃苹果，你呢？",
    "Das Wetter ist 😀 heute , wirklich 👍 .",
    "\"Guten Morgen\", sagte die Großmutter.",
    "Ça coûte 12.50 € – trop cher!",
    "Ελληνικά: Καλημέρα κόσμε!",
    "Русский текст : Привет, мир.",
    "Zahlen: ١٢٣.٤ und 5.5 und ²³.",
    "Naive café, facade, cœur, oeuvre.",
    "Geschützte Leerzeichen: hier und\u00a0dort, auch so.",
    "Ein schmales\u2009Leerzeichen und ein Nullbreiten-Zeichen.",
]

TRICKY = [
    "", " ", "   leading and trailing   ", "tab\there", "a\nb", "a-\nb", "a - \n b", "-\n-\n",
    "<skipped>", "a<skipped>b", "<SKIPPED>", "<skip<skipped>ped>", "<skip", "x <skipped> y",
    "&quot;x&quot;", "&amp;lt;", "&amp;quot;", "&amp;amp;", "&QUOT;", "&amp", "&#39;", "&lt;b&gt;bold&lt;/b&gt;",
    "AT&T", "a&b", "&", "&&", "&quot;&quot;",
    "3.14", "1,000,000", "1.000,50 €", "U.S.A.", "e.g., i.e.", "...", "Hello...", "..1", "1..", ".5", "5.",
    ",5", "5,", "a.b", "a,b", "1.a", "a.1", "1.,2", "x.5.y", "5.x.5", "a,.b", "1,2.3,4",
    "5-year-old", "well-known", "1990-2000", "--", "---", "a - b", "-5", "x-5", "5-", "5--6", "2-3-4", "a-1",
    "1-a", "1 -a", "-", "a -- b", "5—6", "5–6", "–", "é-5", "5-é",
    "$5.00", "50%", "(a)", "[b]", "{c}", "a/b", "a\\b", "a|b", "~", "^", "`code`", "'single'", "\"double\"",
    "it's", "l'homme", "don't", "C++", "a+b=c", "x@y.com", "http://www.example.com/path?q=1&r=2", "#hashtag",
    "a_b", "100km/h", "3:45", "12.5%", "a;b:c", "!?!", "(1)", "[1.5]", "{1,5}", "<1.5>",
    "résumé.", "Straße,", "東京。", "東京.", "東京,1", "emoji 😀.", "😀,😀", "ü.5", "5.ü", "ü,ü", "ß-5",
    "١٢٣.٤", "٣.", "５.５", "5.５", "²,3",
    "a\u00a0b", "a\u3000b", "a\u200bb", "a\u2028b", "a\u2029b", "a\u0085b", "a\u1680b", "a\u202fb", "a\u205fb",
    "a\u2000b\u200ac", "a\x1cb\x1dc\x1ed\x1fe", "a\x0bb\x0cc", "a\rb", "a\r\n", "\u00a0.\u00a0", "\u00a05.\u00a0",
    "end.\u00a0", "5.\u3000", "x\u180ey", "\ufeffBOM at start.",
]


def escape(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


def main():
    de = read_lines(os.path.join(MULTI30K, "test_2016_flickr.de"))[:200]
    fr = read_lines(os.path.join(MULTI30K, "test_2016_flickr.fr"))[:60]
    de_vocab = sorted({w for line in de for w in line.split()})
    fr_vocab = sorted({w for line in fr for w in line.split()})

    sets = []  # (name, hyp file, [ref files])

    def add(name, hyps, refs_list, eol="\n"):
        write_lines(f"{name}.hyp", hyps, eol)
        ref_files = []
        for i, refs in enumerate(refs_list):
            fname = f"{name}.ref" if len(refs_list) == 1 else f"{name}.ref{i + 1}"
            write_lines(fname, refs)
            ref_files.append(fname)
        sets.append((name, f"{name}.hyp", ref_files))

    # Realistic: 200 German references, hypotheses perturbed (drop, replace, case, insert, swap).
    rng = random.Random(1)
    add("multi30k_de", [perturb(line, rng, de_vocab, 1.0) for line in de], [de])
    # French, with apostrophes and accents.
    rng = random.Random(2)
    add("multi30k_fr", [perturb(line, rng, fr_vocab, 0.8) for line in fr], [fr])
    add("punct", PUNCT_HYP, [PUNCT_REF])
    add("unicode", UNICODE_HYP, [UNICODE_REF])
    # Some empty hypothesis lines (and one empty reference line).
    rng = random.Random(3)
    refs = de[:40]
    refs[7] = ""
    hyps = ["" if i % 5 == 2 else perturb(line, rng, de_vocab, 0.6) for i, line in enumerate(refs)]
    add("empty_lines", hyps, [refs])
    # Hypotheses much shorter than the references: brevity penalty well below 1.
    rng = random.Random(4)
    refs = de[:80]
    hyps = []
    for line in refs:
        w = perturb(line, rng, de_vocab, 0.5).split()
        hyps.append(" ".join(w[: max(1, len(w) // 2)]))
    add("short_hyps", hyps, [refs])
    # Two reference sets: the Multi30k references and an independent perturbation of them.
    rng = random.Random(5)
    refs2 = [perturb(line, rng, de_vocab, 0.7) for line in de[:100]]
    hyps = [perturb(line, rng, de_vocab, 0.9) for line in de[:100]]
    add("two_refs", hyps, [de[:100], refs2])
    # Closest reference length ties: hypothesis of n tokens, references of n + 1 and n - 1.
    add("ref_len_tie",
        ["a b c d e f", "g h i j", "k l m n o p q r"],
        [["a b c d e f g", "g h i j k", "k l m n o p q r s"], ["a b c d e", "g h i", "k l m n o p q"]])
    # No n-gram in common: score 0 with the early stop (precisions printed as 0.0).
    add("zero_match", ["xyz qrs tuv", "lorem ipsum dolor !", "foo bar baz qux quux"], [de[:3]])
    # Perfect match: 100.00.
    add("perfect", de[:50], [de[:50]])
    # Unigram matches but no 4-gram match: the 'exp' smoothing path.
    add("exp_smoothing",
        ["Ein Hund Mann läuft Katze über Gras", "Zwei Frauen Kinder spielen Ball am Strand"],
        [["Ein Mann läuft über das grüne Gras", "Zwei Kinder spielen am Strand mit einem Ball"]])
    # Every hypothesis shorter than 4 tokens: no 4-grams at all, the log floor gives 0.
    add("no_4grams", ["Ein Mann", "Ein Hund läuft", "Kinder"],
        [["Ein Mann steht", "Ein Hund läuft schnell", "Kinder spielen"]])
    # Windows line ends and trailing/leading whitespace (sacreBLEU strips at the right end).
    rng = random.Random(6)
    refs = de[:30]
    hyps = []
    for i, line in enumerate(refs):
        h = perturb(line, rng, de_vocab, 0.5)
        h = [h, "  " + h, h + " \t", h + "\u00a0", h + "\u3000 "][i % 5]
        hyps.append(h)
    add("crlf", hyps, [refs], eol="\r\n")

    bleu = BLEU()
    blocks = []
    token_lines = list(TRICKY)
    for name, hyp_file, ref_files in sets:
        hyps = read_lines(os.path.join(HERE, hyp_file))
        refs = [read_lines(os.path.join(HERE, f)) for f in ref_files]
        assert all(len(r) == len(hyps) for r in refs), name
        s = bleu.corpus_score(hyps, refs)
        lines = [f"set {name}", f"hyp {hyp_file}"] + [f"ref {f}" for f in ref_files]
        lines += [
            f"score {s.score!r}",
            "precisions " + " ".join(repr(p) for p in s.precisions),
            "counts " + " ".join(str(c) for c in s.counts),
            "totals " + " ".join(str(t) for t in s.totals),
            f"bp {s.bp!r}",
            f"ratio {s.ratio!r}",
            f"hyp_len {s.sys_len}",
            f"ref_len {s.ref_len}",
            f"summary {s}",
        ]
        blocks.append("\n".join(lines) + "\n")
        token_lines += hyps
        for r in refs:
            token_lines += r
        print(f"{name:14s} {s}")

    with open(os.path.join(HERE, "expected.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(f"# sacreBLEU {sacrebleu.__version__} corpus BLEU (defaults: 13a, mixed case, exp smoothing); "
                "written by make_fixtures.py\n\n")
        f.write("\n".join(blocks))

    tok = Tokenizer13a()
    seen = set()
    with open(os.path.join(HERE, "tokenize_13a.txt"), "w", encoding="utf-8", newline="\n") as f:
        for line in token_lines:
            if line in seen:
                continue
            seen.add(line)
            f.write(f"{escape(line)}\t{escape(tok(line))}\n")
    print(f"{len(seen)} tokenizer cases", file=sys.stderr)


if __name__ == "__main__":
    main()
