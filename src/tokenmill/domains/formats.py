"""A format label per document (article, list, forum, qa, code, reference, legal, fiction), by rules.

Each rule compares measures of the text (shares of lines, rates per 100 words, counts of markers) with
thresholds; the measures come back with the label, so a reviewer sees why a document got it. The label says
what kind of page a document is, not what it is about: a news story on a court case is an article, the terms of
use of the site are legal. The labels, in the order they are tried:
- code: programs and machine-readable text (JSON, XML, robots.txt): code-like lines, bracket symbols.
- legal: licences, terms of use, privacy and cookie policies, declarations: legal terms of many kinds, or
  numbered clauses.
- qa: quiz and exam items ("Question:", "Answer:", GSM8K's "####"), FAQ pages: questions with their answers.
- forum: posts by users, each under a name and a date or time: threads, comment sections, user reviews.
- fiction: stories and drama: persons told about in the past tense, direct speech, no numbers; "NAME:" lines.
- reference: encyclopedia, dictionary and documentation entries: citation marks, wiki headings, signatures.
- list: items rather than sentences: link and headline lists, tables, tables of contents, word lists.
- qa again for interviews (short questions, each answered, in running text), reference again for a page
  whose first sentence defines its subject, and article for the running prose that is left (news, blog
  posts, essays, speeches).
The source bucket is a prior: a document of the code bucket is code unless it reads as documentation (running
prose, few code lines), one of the legal or reference bucket keeps that label unless it is code. A URL is a hint
that lowers one rule's bar (a forum, an FAQ, a policy page, a wiki or documentation site).

Only the first `MAX_CHARS` characters are read: the format shows on the first pages, and a book costs what a
page does. The thresholds were set on, and the accuracy is measured against, tests/data/formats_labelled.jsonl:
real documents from ../shared/data labelled by reading them (tests/data/formats_labelled.md: provenance,
accuracy per label, known misses; benchmarks/RESULTS.md, "Format labels": speed).
"""

from __future__ import annotations

import re
from collections import Counter
from statistics import median

FORMATS = ("article", "list", "forum", "qa", "code", "reference", "legal", "fiction")
# Pipeline buckets whose documents have a known format unless the text says otherwise.
BUCKET_FORMATS = {"code": "code", "legal": "legal", "reference": "reference"}

MAX_CHARS = 8_000  # about 1,300 words: on the labelled sample 8,000 and 20,000 give the same labels, 4,000 loses 2

_STRIP = "\"'“”‘’«»()[]{}<>.,;:!?*…—–-_/|#"
_CLOSERS = "\"'”’»)]*"  # closing quotes and brackets after a sentence's end: 'she said.”', '(see above).'
_SENTENCE_ENDS = (". ", ".\n", ".\xa0", "? ", "?\n", "! ", "!\n", '." ', ".” ")
_BULLET = re.compile(r"^(?:[-*•·‣▪►–—+>]\s|\(?\d{1,3}[.)](?:\s|$)|\(?[a-z][.)]\s|[ivx]{1,4}[.)]\s)", re.I)
# Lines only code has: a keyword at the start, a statement or block end, a tag, an assignment.
_CODE_START = re.compile(
    r"(?:def |class \w|import \w|from [\w.]+ import |return\b|elif\b|else\s*[:{]|try\s*[:{]|except\b|"
    r"(?:if|for|while)\b.*[:{]$|var |let |const |function\b|public |private |static |#include|#!|"
    r"<[?!]|</?[A-Za-z][\w:-]*(?:\s[^>]*)?/?>|[})\]][;,)]*$|@\w+|\w[\w.\[\]]*\s*[+\-*/]?=\s*[\[{(\"'\w-])")
_CODE_ENDS = (";", "{", "}", "[", "(", "):", "){", ") {", "=>", "->")  # statement and block ends
_DIRECTIVE = re.compile(r"[A-Za-z][\w-]*:\s*[/*<{\[\d.$~\\]\S*$")  # robots.txt, HTTP headers, YAML scalars
_COMMENT = ("# ", "#\t", "//", "/*", "* ", "*/", "-- ")
_CODE_SYMBOLS = b"{}[]()<>=;_|\\$&*/#\""
_QA_MARKER = re.compile(
    r"(?:Q\s?[:.)]\s|A\s?[:.)]\s|Question\s?\d*\s?:|Answer\s?:|Choices\s?:|Passage\s?:|####\s|"
    r"\d+\s+answers?$|(?:best|accepted) answer)", re.I)
_FAQ_TITLE = re.compile(r"\b(?:faqs?|frequently asked questions|questions and answers|q\s?&\s?a)\b", re.I)
_FORUM_FURNITURE = re.compile(
    r"\b(?:repl(?:y|ies)|quote|zitat|antworten|permalink|poster|reviewer|beiträge|moderator|reactions)\b|"
    r"posted (?:by|on)|wrote:|said:|member since|mitglied seit|joined:|report (?:post|abuse)|log in to reply")
_TIME = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?\s?(?:[ap]\.?m\.?)?|\d{1,2}\.\d{1,2}\.\d{2,4}|\d{1,2}/\d{1,2}/\d{2,4}",
                   re.I)
# Legal vocabulary: each word or phrase is one kind (licence, licensed and licensor are all "licen").
_LEGAL_WORDS = {w: w[:6] for w in (
    "shall", "hereby", "herein", "hereof", "hereunder", "thereof", "therein", "whereas", "pursuant",
    "notwithstanding", "warranty", "warranties", "liable", "liability", "indemnify", "indemnity", "indemnification",
    "license", "licence", "licensed", "licenses", "licences", "licensing", "licensor", "licensee", "agreement",
    "copyright", "infringe", "infringement", "privacy", "cookie", "cookies", "disclaim", "disclaimer", "disclaims",
    "jurisdiction", "entitled", "prohibited", "comply", "compliance", "obligation", "obligations", "provision",
    "provisions", "policy", "breach", "consent", "terminate", "termination", "governed", "applicable", "lawful")}
_LEGAL_PHRASES = ("terms of use", "terms of service", "terms and conditions", "you agree", "personal data",
                  "personal information", "third party", "third parties", "reserve the right", "sole discretion",
                  "must not", "may not")
_CLAUSE = re.compile(r"(?:(?:section|article|§)\s*\d+|\d+\.[A-Z0-9]{1,2}\.(?:\d+\.)?\s|\((?:[a-z]|\d{1,2})\)\s)", re.I)
_OPEN_QUOTE = re.compile(r"(?:^|[\s(\[—-])[“\"‘«]\w")
_SPEAKER = re.compile(r"([A-Z][A-Z0-9 .#'’-]{1,30}):\s|([A-Z][a-z]+(?: [A-Z][a-z]+){0,2}):$")
_NARRATIVE = frozenset(("he", "she", "him", "her", "his", "i", "me", "my"))
_PAST = frozenset(("was", "were", "had", "said", "did", "went", "came", "looked", "thought", "saw", "knew", "told",
                   "asked", "felt", "seemed", "began", "took", "turned"))
_PRESENT = frozenset(("is", "are", "has", "have", "do", "does", "can", "will"))
_WIKI_LINE = re.compile(r"(?:see also|references|external links|further reading|bibliography|notes)$|=+ .+ =+$|"
                        r"(?:definition|meaning|etymology|pronunciation|usage):", re.I)
# Documentation: a call signature alone on its line ("strftime(self, fmt)"), a reST heading underline.
_DOC_LINE = re.compile(r"[A-Za-z_][\w.]*\([^()]*\)$|([*=~^-])\1{3,}$")
_CITATION = re.compile(r"\[(?:\d{1,3}|edit|citation needed)\]")
_DEFINITION = re.compile(r"(?:Definition: )?(?!(?:I|We|You|It|This|That|There|These|They|He|She|Our)\b)"
                         r"(?:The |An? )?[A-Z][\w'’.-]*(?: [\w'’.()-]+){0,7}? "
                         r"(?:is|was|are|were|refers to) (?:a|an|the|one)\b")
_HEADING = re.compile(r"(?:=+ .+ =+|#{1,4} \S.*|[A-Z0-9][^.!?:;,|]{0,60})$")
_URL_HINTS = {
    "forum": re.compile(r"forum|thread|topic|showthread|/comments?/|discussion|/board", re.I),
    "qa": re.compile(r"faq|/questions?/|answers?\.", re.I),
    "legal": re.compile(r"privacy|terms|legal|licen[cs]e|cookie|disclaimer|impressum|/tos\b", re.I),
    "reference": re.compile(r"wiki|/docs?/|docs\.|dictionary|glossary|encyclop|/words?/", re.I),
}


class _View:
    """What the measures share, built once per document: the lines and units (paragraphs of hard-wrapped
    text, else lines) with their word counts, the words with theirs, the lower-cased text."""

    def __init__(self, text: str):
        self.text = text[:MAX_CHARS]
        self.lower = self.text.lower()
        self.lines = [s for s in (line.strip() for line in self.text.split("\n")) if s]
        self.line_words = [s.count(" ") + 1 for s in self.lines]
        self.units = _units(self.text)
        self.unit_words = [u.count(" ") + 1 for u in self.units]
        self.unit_terminal = [_is_terminal(u) for u in self.units]
        self.counts: dict[str, int] = {}  # words, stripped of the punctuation around them
        for token, n in Counter(self.lower.split()).items():
            word = token.strip(_STRIP)
            self.counts[word] = self.counts.get(word, 0) + n
        self.n_words = sum(self.counts.values()) - self.counts.pop("", 0)


def _units(text: str) -> list[str]:
    """Blank-line separated blocks of hard-wrapped prose (Project Gutenberg, plain-text mail: median line 45-80
    characters, none over 100, and a third of the lines continuing in lower case, which a list of titles does
    not) become one paragraph each; every other line is a unit of its own."""
    out: list[str] = []
    for block in re.split(r"\n[ \t\r]*\n", text):
        lines = [s for s in (line.strip() for line in block.split("\n")) if s]
        if (len(lines) >= 2 and max(map(len, lines)) <= 100 and 45 <= median(map(len, lines)) <= 80
                and sum(s[0].islower() for s in lines[1:]) >= 0.3 * (len(lines) - 1)):
            out.append(" ".join(lines))
        else:
            out.extend(lines)
    return out


def _share(n: float, d: float) -> float:
    return n / d if d else 0.0


def _per_100_words(v: _View, n: float) -> float:
    return 100 * _share(n, v.n_words)


def _is_terminal(unit: str) -> bool:
    """Ends in . ! ? : ; (maybe inside closing quotes or brackets), not in an ellipsis: a teaser is no sentence."""
    s = unit.rstrip(_CLOSERS)
    return s[-1:] in (".", "!", "?", ":", ";") and not s.endswith(("...", "…"))


def _is_question(unit: str) -> bool:
    return unit.rstrip(_CLOSERS).endswith("?")


# ---------------------------------------------------------------------------------------------------------
# The measures, one function each


def bullet_frac(v: _View) -> float:
    """Share of units that start with a bullet or an item number ("- ", "• ", "3. ", "b) ")."""
    return _share(sum(_BULLET.match(u) is not None for u in v.units), len(v.units))


def item_frac(v: _View) -> float:
    """Share of units that are items, not sentences: at most 6 words, or at most 15 words without terminal
    punctuation (a title, a link, a table row, a menu entry), or a bulleted line of at most 20 words."""
    items = sum(n <= 6 or (n <= 15 and not end) or (n <= 20 and _BULLET.match(u) is not None)
                for u, n, end in zip(v.units, v.unit_words, v.unit_terminal))
    return _share(items, len(v.units))


def prose_frac(v: _View) -> float:
    """Share of characters in units of at least 12 words that end in terminal punctuation: running text."""
    prose = sum(len(u) for u, n, end in zip(v.units, v.unit_words, v.unit_terminal) if n >= 12 and end)
    return _share(prose, sum(map(len, v.units)))


def words_per_sentence(v: _View) -> float:
    """Words per sentence end (. ! ? before a space or a line end), at most 1000: prose has 10 to 30, a word
    list or a navigation dump hundreds."""
    ends = sum(map(v.text.count, _SENTENCE_ENDS))
    ends += _is_terminal(v.text.rstrip())
    return min(1000.0, v.n_words / ends) if ends else (1000.0 if v.n_words else 0.0)


def code_line_frac(v: _View) -> float:
    """Share of lines that only code has: a keyword at the start, a statement or block end, a tag, an
    assignment, a `key: /value` directive or a comment."""
    def code_like(s: str) -> bool:
        return bool(s.endswith(_CODE_ENDS) or s.startswith(_COMMENT) or _CODE_START.match(s) or _DIRECTIVE.match(s))
    return _share(sum(map(code_like, v.lines)), len(v.lines))


def code_symbol_frac(v: _View) -> float:
    """Share of non-space bytes (of the UTF-8 text) that are brackets, operators and other symbols prose
    seldom uses. Bytes, not characters: deleting a byte set is one fast pass."""
    raw = v.text.encode("utf-8", "replace")
    non_space = len(raw.translate(None, b" \n\t\r"))
    return _share(len(raw) - len(raw.translate(None, _CODE_SYMBOLS)), non_space)


def qa_marker_lines(v: _View) -> int:
    """Lines that open a question or an answer: "Q:", "A.", "Question:", "Answer:", "Choices:", GSM8K's
    "#### 18", a Q&A site's "3 Answers"."""
    return sum(_QA_MARKER.match(s) is not None for s in v.lines)


def answered_questions(v: _View) -> int:
    """Units ending in a question mark followed by a unit that does not: question-answer pairs."""
    us = v.units
    return sum(_is_question(a) and not _is_question(b) for a, b in zip(us, us[1:]))


def short_question_frac(v: _View) -> float:
    """Share of units that are a question of at most 30 words: an interview's or an FAQ's question line."""
    return _share(sum(n <= 30 and _is_question(u) for u, n in zip(v.units, v.unit_words)), len(v.units))


def faq_title(v: _View) -> float:
    """1 when one of the first five lines is a title (at most 6 words, not a menu) calling the page an FAQ."""
    return float(any(len(s.split()) <= 6 and "|" not in s and _FAQ_TITLE.search(s) for s in v.lines[:5]))


def forum_line_frac(v: _View) -> float:
    """Share of lines that are forum furniture: at most 8 words with reply, quote, poster, reviewer, moderator,
    "posted by", "wrote:", "member since" (or their German forms, common in the sample's forums). Short lines
    only: a blog post about moderation and replies uses the words in its sentences."""
    furniture = sum(n <= 8 and _FORUM_FURNITURE.search(s.lower()) is not None for s, n in zip(v.lines, v.line_words))
    return _share(furniture, len(v.lines))


def signed_posts(v: _View) -> int:
    """Short lines (at most 12 words) with a clock time or a date that are followed by a line of at least 5
    words without one, and not a table row: a post's signature or header, then its body."""
    stamps = [n <= 12 and (":" in s or s.count(".") >= 2 or s.count("/") >= 2) and _TIME.search(s) is not None
              for s, n in zip(v.lines, v.line_words)]
    return sum(a and not b and n >= 5 and s.count("\t") < 2
               for a, b, n, s in zip(stamps, stamps[1:], v.line_words[1:], v.lines[1:]))


def table_row_frac(v: _View) -> float:
    """Share of lines with two or more tabs: table rows as the extractor writes them."""
    return _share(sum(s.count("\t") >= 2 for s in v.lines), len(v.lines))


def legal_term_rate(v: _View) -> float:
    """Legal vocabulary per 100 words: shall, hereby, warranty, liability, licence, privacy, terms of use ..."""
    n = sum(v.counts.get(w, 0) for w in _LEGAL_WORDS) + sum(v.lower.count(p) for p in _LEGAL_PHRASES)
    return _per_100_words(v, n)


def legal_term_kinds(v: _View) -> int:
    """Distinct legal terms used: a news story on copyright repeats one or two, a licence uses many."""
    words = {kind for w, kind in _LEGAL_WORDS.items() if v.counts.get(w, 0)}
    return len(words) + sum(p in v.lower for p in _LEGAL_PHRASES)


def clause_frac(v: _View) -> float:
    """Share of units that open with clause numbering: "Section 3", "Article 12", "1.F.3.", "(a)"."""
    return _share(sum(_CLAUSE.match(u) is not None for u in v.units), len(v.units))


def dialogue_frac(v: _View) -> float:
    """Share of units with an opening quotation mark: direct speech (or quotations)."""
    quotes = ("“", '"', "‘", "«")
    return _share(sum(any(q in u for q in quotes) and _OPEN_QUOTE.search(u) is not None for u in v.units),
                  len(v.units))


def speaker_line_frac(v: _View) -> float:
    """Share of lines that open with a speaker's name and a colon, as plays and screenplays print them,
    counted only when at least two different names speak (a quiz's "HISTORY: ..." lines are one name)."""
    names = [m.group(1) or m.group(2) for m in map(_SPEAKER.match, v.lines) if m]
    return _share(len(names), len(v.lines)) if len(set(names)) >= 2 else 0.0


def narrative_pronoun_rate(v: _View) -> float:
    """He, she, him, her, his, I, me, my per 100 words: stories are told about persons, or by one."""
    return _per_100_words(v, sum(v.counts.get(w, 0) for w in _NARRATIVE))


def past_tense_share(v: _View) -> float:
    """Past-tense verbs (was, had, said, went ...) among them and present-tense ones (is, has, can ...):
    stories are told in the past, essays and reports argue in the present."""
    past = sum(v.counts.get(w, 0) for w in _PAST)
    return _share(past, past + sum(v.counts.get(w, 0) for w in _PRESENT))


def digit_word_frac(v: _View) -> float:
    """Share of words that start or end with a digit (2006, 12:30pm, $18, 3D): dates, sums and scores are the
    stuff of reports, not of stories."""
    return _share(sum(n for w, n in v.counts.items() if w[0].isdigit() or w[-1].isdigit()), v.n_words)


def heading_frac(v: _View) -> float:
    """Share of lines that are headings: a wiki "= Title =", a Markdown "## Title", or a capitalised line of
    at most 8 words without punctuation."""
    return _share(sum(n <= 8 and _HEADING.match(s) is not None for s, n in zip(v.lines, v.line_words)),
                  len(v.lines))


def reference_markers(v: _View) -> int:
    """Encyclopedia, dictionary and documentation furniture: citation marks ([1], [edit]), "See also",
    "References", "Retrieved", wiki headings, WikiText's "@-@", "Definition:", "Etymology:", call signatures
    on a line of their own, reST heading underlines."""
    return (len(_CITATION.findall(v.lower)) + v.lower.count("retrieved") + v.lower.count("from wikipedia")
            + min(v.text.count(" @-@ "), 3)
            + sum(_WIKI_LINE.match(s) is not None or _DOC_LINE.match(s) is not None for s in v.lines))


def definition_opening(v: _View) -> float:
    """1 when one of the first three units of at least 8 words defines its subject ("Manila is the capital
    city of ...", "An ironclad is a steam-propelled warship ...")."""
    firsts = [u for u, n in zip(v.units[:8], v.unit_words) if n >= 8][:3]
    return float(any(_DEFINITION.match(u) is not None for u in firsts))


MEASURES = (bullet_frac, item_frac, prose_frac, words_per_sentence, code_line_frac, code_symbol_frac,
            qa_marker_lines, answered_questions, short_question_frac, faq_title, forum_line_frac, signed_posts,
            table_row_frac, legal_term_rate, legal_term_kinds, clause_frac, dialogue_frac, speaker_line_frac,
            narrative_pronoun_rate, past_tense_share, digit_word_frac, heading_frac, reference_markers,
            definition_opening)


# ---------------------------------------------------------------------------------------------------------
# The thresholds and the rules, in the order format_of tries them

# One line each: the threshold, and what was measured on the labelled sample (its 173 documents) to set it.
CODE_LINES = 0.3  # code: 0.32-1.0 of the lines code-like; others at most 0.14 (a ";"-ended code of conduct 0.31)
CODE_LINES_SYMBOLS = 0.08  # ... with symbols around: code 0.096 and up; GSM8K's <<3*3=9>> 0.094, but no code lines
CODE_SYMBOLS_ALONE = 0.15  # JSON 0.18, XML 0.16, robots.txt 0.36 of the bytes symbols; other formats at most 0.094
CODE_LINES_ALONE = 0.6  # config files (robots.txt: 0.93-1.0) have few symbols but nothing else; others at most 0.31
LEGAL_TERMS = 1.5  # legal texts: legal terms per 100 words median 3.2, most 1.2-6.3; prose about law up to 2.5 ...
LEGAL_KINDS = 4  # ... but of 1-3 kinds (a post on copyright, a footer's "Terms, Privacy"); legal texts median 8
LEGAL_TERMS_HINTED = 1.0  # on a policy URL (privacy, terms, licence) less vocabulary suffices
LEGAL_CLAUSES = 0.2  # numbered licences: "1.F.3.", "Article 12" open 0.27-0.64 of the units; others at most 0.14
QA_MARKERS = 2  # quiz and exam items: 2-32 "Question:"/"Answer:"/"####" lines; other formats at most 1
FORUM_LINES = 0.08  # threads: furniture on 0.08-0.23 of the lines; other formats at most 0.067 ("Posted on" once)
FORUM_LINES_HINTED = 0.04  # on a forum URL (forum, thread, comments) half as many: a reddit page has 0.045
SIGNED_POSTS = 3  # threads: 3-27 dated signatures over a post body; other formats at most 1 (but a listing 10)
SPEAKER_LINES = 0.1  # plays and screenplays: "NAME:" opens 0.19-1.0 of the lines; prose formats at most 0.02
FICTION_DIGITS = 0.005  # stories: median 0 words with digits, a screenplay 0.02; news and articles median 0.013
FICTION_PAST = 0.6  # stories: past tense 0.66 (median) of the tense markers; digit-free articles at most 0.52 ...
FICTION_PERSONS = 2.5  # ... and persons (he, she, I) per 100 words: stories median 5.9, digit-free articles <= 3.2
DIALOGUE_UNITS = 0.1  # direct speech in a tenth of the units (stories median 0.39; essays quote too, up to 0.4) ...
DIALOGUE_PERSONS = 4  # ... with persons at 4 per 100 words, above the 3.2 of the articles
PERSONS_ALONE = 8  # persons at 8 per 100 words is a story in any tense (a diary in the present: 9.6)
REFERENCE_MARKERS = 3  # encyclopedia and wiki pages: median 4, up to 39; prose formats at most 2
HINTED_HEADINGS = 0.1  # on a wiki or documentation URL, headings on a tenth of the lines
LIST_ITEMS = 0.5  # lists: items on 0.92 (median) of the units, articles 0.21 ...
LIST_PROSE = 0.5  # ... and running prose on 0.04 (median) of the text, articles 0.92
TABLE_ROWS = 0.5  # tables: up to 0.98 of the lines tabbed rows; forum post headers at most 0.38
LIST_BULLETS = 0.7  # bullets or numbers on seven units in ten, even when the items are sentences
SENTENCE_WORDS = 60  # words a sentence end: articles 11-57; a word list or a menu dump has hardly any end
INTERVIEW_ANSWERS = 3  # three answered questions ...
INTERVIEW_QUESTIONS = 0.1  # ... short questions on a tenth of the units: an interview


def is_code(m: dict[str, float]) -> bool:
    return ((m["code_line_frac"] >= CODE_LINES and m["code_symbol_frac"] >= CODE_LINES_SYMBOLS)
            or m["code_symbol_frac"] >= CODE_SYMBOLS_ALONE or m["code_line_frac"] >= CODE_LINES_ALONE)


def is_legal(m: dict[str, float], hint: bool = False) -> bool:
    return ((m["legal_term_rate"] >= LEGAL_TERMS and m["legal_term_kinds"] >= LEGAL_KINDS)
            or m["clause_frac"] >= LEGAL_CLAUSES or (hint and m["legal_term_rate"] >= LEGAL_TERMS_HINTED))


def is_quiz_or_faq(m: dict[str, float], hint: bool = False) -> bool:
    # Markers, or one marker over an answered question (a single GSM8K item), or an FAQ title (or URL) over one.
    answered = m["answered_questions"] >= 1
    return (m["qa_marker_lines"] >= QA_MARKERS or (m["qa_marker_lines"] >= 1 and answered)
            or (bool(m["faq_title"] or hint) and answered))


def is_forum(m: dict[str, float], hint: bool = False) -> bool:
    return m["forum_line_frac"] >= (FORUM_LINES_HINTED if hint else FORUM_LINES) or m["signed_posts"] >= SIGNED_POSTS


def is_fiction(m: dict[str, float]) -> bool:
    if m["speaker_line_frac"] >= SPEAKER_LINES:
        return True
    persons = m["narrative_pronoun_rate"]
    return m["digit_word_frac"] < FICTION_DIGITS and (
        (m["past_tense_share"] >= FICTION_PAST and persons >= FICTION_PERSONS)
        or (m["dialogue_frac"] >= DIALOGUE_UNITS and persons >= DIALOGUE_PERSONS) or persons >= PERSONS_ALONE)


def is_encyclopedic(m: dict[str, float], hint: bool = False) -> bool:
    # Tried before the list rule: wikis and documentation are full of short lines.
    return m["reference_markers"] >= REFERENCE_MARKERS or (hint and m["heading_frac"] >= HINTED_HEADINGS)


def is_list(m: dict[str, float]) -> bool:
    prose_ok = m["prose_frac"] < LIST_PROSE
    return ((m["item_frac"] >= LIST_ITEMS and prose_ok) or m["table_row_frac"] >= TABLE_ROWS
            or m["bullet_frac"] >= LIST_BULLETS or (m["words_per_sentence"] >= SENTENCE_WORDS and prose_ok))


def is_interview(m: dict[str, float]) -> bool:
    return m["answered_questions"] >= INTERVIEW_ANSWERS and m["short_question_frac"] >= INTERVIEW_QUESTIONS


def is_defined(m: dict[str, float], hint: bool = False) -> bool:
    # A defining first sentence counts with one marker or a reference URL: "Leeds is a fabulous city" opens
    # a blog post, "Manila is the capital city of the Philippines" a wiki page.
    return bool(m["definition_opening"]) and (m["reference_markers"] >= 1 or hint)


def measures(text: str) -> dict[str, float]:
    """Every measure of the text, rounded to 4 digits."""
    v = _View(text or "")
    return {f.__name__: round(float(f(v)), 4) for f in MEASURES}


def format_of(text: str, url: str | None = None, bucket: str | None = None) -> tuple[str, dict[str, float]]:
    """The format label of a document (one of FORMATS) and the measures that decided it."""
    m = measures(text)
    hint = {k: bool(url and p.search(url)) for k, p in _URL_HINTS.items()}
    prior = BUCKET_FORMATS.get(bucket or "")
    if prior == "code":
        # Programs and their documentation: running prose with few code lines is the latter (README, reST).
        return ("reference" if m["prose_frac"] >= 0.5 and m["code_line_frac"] < 0.2 else "code"), m
    if is_code(m):
        label = "code"
    elif prior is not None:
        label = prior
    elif is_legal(m, hint["legal"]):
        label = "legal"
    elif is_quiz_or_faq(m, hint["qa"]):
        label = "qa"
    elif is_forum(m, hint["forum"]):
        label = "forum"
    elif is_fiction(m):
        label = "fiction"
    elif is_encyclopedic(m, hint["reference"]):
        label = "reference"
    elif is_list(m):
        label = "list"
    elif is_interview(m):
        label = "qa"
    elif is_defined(m, hint["reference"]):
        label = "reference"
    else:
        label = "article"
    return label, m
