"""C4's cleaning rules (Raffel et al. 2020, section 2.2; tensorflow_datasets text/c4_utils.py), made
document-level.

C4 edits pages: it removes lines without terminal punctuation, with fewer than 5 words, with a word over
1000 characters, mentioning "javascript" or a cookie / terms-of-use phrase, and then drops pages with
"lorem ipsum", a curly bracket, or fewer than 3 sentences left. This stage keeps or drops whole documents
(line removal is the business of dedup's boilerplate-line pass), so each line rule becomes a measured
fraction with a threshold:
- c4_terminal_punct_char_frac: share of the characters of non-blank lines that are in lines ending in
  terminal punctuation, i.e. the part of the text C4's punctuation rule would keep. Weighted by characters,
  not lines: a Wikipedia article's section headings are a third of its lines but a few percent of its text
  (the line share is FineWeb's fineweb_line_punct_ratio). Terminal punctuation is C4's . ? ! " and the
  typographic closing quotes ” » ›, also when followed by closing brackets or quotes (".)" "?”" "”)") and
  a footnote marker ("infinite.(170)"), never "..." or "…"; Wikipedia citation marks ([1], [edit])
  are removed first, as C4 does. Dropped below `min_terminal_punct_char_frac` (0.5: at least half the text
  survives C4's line rule; measured 5th percentiles: WikiText articles 0.80, ABC news 0.89).
- c4_javascript_line_frac, c4_policy_line_frac: share of non-blank lines C4 would delete for mentioning
  javascript / a policy phrase. Dropped above their maxima (0.2): a page mostly made of such lines is a
  notice, not content; a page with one such line keeps it here (C4 would cut just that line).
The page-level rules stay as C4 has them, applied to the lines C4 would keep:
- c4_lorem_ipsum: occurrences of "lorem ipsum" anywhere in the text (C4: in kept lines; anywhere is
  stricter and cheaper to explain). Dropped above `max_lorem_ipsum` (0).
- c4_curly_brace_lines: kept lines containing "{". Code in lines without terminal punctuation does not count,
  as in C4. Dropped above `max_curly_brace_lines` (0).
- c4_sentences: sentences in the kept lines, counted by terminal punctuation followed by a space or the
  line end (C4 uses nltk's punkt; abbreviations such as "Mr." count here as sentence ends). Dropped below
  `min_sentences` (3).
"""

from __future__ import annotations

import re

from tokenmill.filters.params import C4
from tokenmill.filters.text import Measure, Text, measure, ratio


_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.I)
# C4's end marks . ? ! " , with the typographic closing quotes ” » › counted like ". Each may be followed by
# closing brackets and quotes: 'she said.”', 'as shown (see above).', '“Why?”)'.
# A footnote marker ("infinite.(170)") and Gutenberg's italic underscores (".)_") may follow too.
_CLOSING = r"""[)\]}"'”’»›_]*"""
_TERMINAL = re.compile(rf"""(?:[.?!]|["”»›]){_CLOSING}(?:\(\d{{1,3}}\)|\[\d{{1,3}}\])?$""")
_ELLIPSIS_END = re.compile(rf"(?:\.\.\.|…){_CLOSING}$")
_SENTENCE_END = re.compile(r"[.!?]+['\"”’»›)\]}]*(?:\s|$)")


def is_terminal(line: str) -> bool:
    return _TERMINAL.search(line) is not None and _ELLIPSIS_END.search(line) is None


def rules(t: Text, cfg: C4) -> list[Measure]:
    policy = tuple(cfg.policy_substrings)
    min_words, max_word = cfg.min_words_per_line, cfg.max_word_length
    lines = t.nonempty_lines
    chars = terminal_chars = javascript = policy_lines = curly = sentences = 0
    for line in lines:
        chars += len(line)
        if "[" in line:
            line = _CITATION.sub("", line).rstrip()
        lower = line.lower()
        is_js = "javascript" in lower
        is_policy = any(p in lower for p in policy)
        javascript += is_js
        policy_lines += is_policy
        if not is_terminal(line):
            continue
        terminal_chars += len(line)
        words = line.split()
        if len(words) < min_words or is_js or any(len(w) > max_word for w in words):
            continue
        curly += "{" in line
        if not is_policy:
            sentences += max(1, len(_SENTENCE_END.findall(line)))
    return [
        measure("c4_terminal_punct_char_frac", ratio(terminal_chars, chars), lo=cfg.min_terminal_punct_char_frac),
        measure("c4_lorem_ipsum", t.text.lower().count("lorem ipsum"), hi=cfg.max_lorem_ipsum),
        measure("c4_curly_brace_lines", curly, hi=cfg.max_curly_brace_lines),
        measure("c4_javascript_line_frac", ratio(javascript, len(lines)), hi=cfg.max_javascript_line_frac),
        measure("c4_policy_line_frac", ratio(policy_lines, len(lines)), hi=cfg.max_policy_line_frac),
        measure("c4_sentences", sentences, lo=cfg.min_sentences),
    ]
