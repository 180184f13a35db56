"""Rule-based paraphrases of real text: labelled data for the semantic dedup and semantic contamination checks.

Every function here is pure and deterministic: randomness comes only from the `random.Random` passed in (or
one seeded from the `seed` argument), and real text is read from `../shared/data` at run time (never copied).

The rewrite rules
-----------------
- `sentences`: a regex splitter. A sentence ends at ".", "!" or "?" (and any closing quote or bracket) followed
  by white space and a capital letter, a digit or an opening quote; not after a known abbreviation ("Dr.",
  "e.g.", "U.S.") or a single letter (an initial).
- `reorder_sentences`: shuffles the sentences of each paragraph and the order of the paragraphs (an order
  equal to the original is rotated by one). A text of one sentence has its clauses reordered instead: by a
  rule of `reorder_clauses` where one fits, otherwise its parts split at ", " and "; " are shuffled (first
  letters re-cased, the final punctuation kept).
- `swap_synonyms`: replaces whole words and phrases (longest first) from tests/data/synonyms.tsv. Lower-case
  words are replaced; a capitalised word only at the start of a sentence (elsewhere it is likely a name), its
  replacement capitalised; words in capitals, parts of hyphenated compounds and of contractions are left
  alone. An article before a replaced word is re-chosen ("a result" -> "an outcome"). `share` < 1 replaces a
  stable pseudo-random share of the occurrences (a CRC of the word and its offset decides).
- `drop_clauses`: removes, each with probability `share`, parentheticals "( ... )", clauses between two
  commas that open with a relative pronoun, a preposition, "a"/"an" or a discourse word (", which ...,",
  ", a progressive disease ...,", ", from Avocados Australia,"), and trailing subordinate clauses (", which
  ...", " because ...", ", although ..." to the end of the sentence). At least one clause goes when the text
  has one; a sentence is never cut under five words or to end in "says"/"that"; the text is never empty.
- `reorder_clauses`: within each sentence, one of the rules that fit (rng picks):
    a leading subordinate clause goes to the end ("If X, (then) Y." -> "Y if X.");
    a short leading prepositional phrase goes to the end ("In 2006, X." -> "X in 2006.");
    a trailing subordinate clause goes to the front ("X because Y." -> "Because Y, X.");
    two clauses joined by ", and" (the second with its own subject) swap;
    in a question, a final infinitive of purpose or phrase of time or place is fronted ("Which tool is used to
    keep spores out?" -> "To keep spores out, which tool is used?").
  Quotations are left alone, and a rule is not used when it would leave a part ending in a function word.
- `question_to_statement`: a benchmark question and its gold answer as one declarative sentence, by the first
  rule that matches (leading context sentences are kept as they are):
    (a question opening with a clause, "If X, what ...?", keeps the clause and has the rules applied to the rest)
    1. a blank ("_" runs) is filled with the answer;
    2. "How to X." (a PIQA goal) -> "To X, y."; no question mark (a completion: "Predators eat", "...
       because"): the answer completes the sentence;
    3. "How do|can I X?" and "What is the best way to X?" -> "To X, y."; "What/Who is|are|was|were X?" ->
       "X is Y." ("... is that y" when the answer is a clause);
    4. "Which of the following [nouns] VERB REST?" -> "Y VERB REST." for an answer of up to five words (VERB
       not "best", "describes", "explains"), otherwise "The one that VERB REST: y.";
    5. "Which|What NOUN VERB REST?" -> "The NOUN that VERB REST is Y." (not for inverted questions: "Which gas
       can plants absorb?");
    6. social situations (SIQA): "How would you describe X?" -> "X could be described as y."; "How would X
       feel REST?" -> "X would feel y REST."; "What will|does|did X want|need|have to do REST?" -> "REST, X
       will want to y.";
    7. "Why is it that X?" -> "X because y."; "What|Where|Why AUX SUBJECT REST?" where the subject is a
       pronoun, a name or "the NOUN" before a common verb -> "What SUBJECT AUX REST is y." / "A place where
       SUBJECT AUX REST is y." / "SUBJECT AUX REST because (of) y." (do is dropped, does conjugates);
    8. otherwise "<question without the question mark>: the answer is <answer>."
- `options_in_prose`: the question restated ("Asked which ...", "Given the options ... the answer when asked
  ..."; the template chosen by a CRC of the question) with every option spelled out in prose and the correct
  one named.

The data sets
-------------
- `labelled_pairs`: document pairs from ABC science/rural news (stories of >= 600 characters joined into
  articles of 3-6 paragraphs) and WikiText-2 articles, labelled duplicate or not, per kind (see its docstring).
- `paraphrased_items`: real multiple-choice items of seven benchmark sources, four rewrites each
  (tests/data/paraphrased_items.jsonl); `same_topic_documents`: a clean real paragraph on each item's topic.

`python tests/paraphrase.py` regenerates tests/data/paraphrased_items.jsonl and prints its counts per kind.
"""

from __future__ import annotations

import csv
import difflib
import functools
import gzip
import json
import math
import random
import re
import sys
import zlib
from collections import Counter
from pathlib import Path

from scipy import sparse

ROOT = Path(__file__).resolve().parents[1]
SYNONYMS = ROOT / "tests" / "data" / "synonyms.tsv"
ITEMS_FILE = ROOT / "tests" / "data" / "paraphrased_items.jsonl"

STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between
both but by can could did do does doing down during each either few for from further had has have having he her
here hers herself him himself his how i if in into is it its itself just may me might more most must my myself
neither no nor not now of off on once one only or other our ours ourselves out over own same shall she should so
some such than that the their theirs them themselves then there these they this those through to too under until
up upon very was we were what when where which while who whom whose why will with within without would yet you
your yours yourself yourselves many much every another
""".split())

DETERMINERS = frozenset("the a an this that these those his her its their our your my one some each every any "
                        "another".split())
# Words that open the verb phrase after "Which of the following" / "Which NOUN": auxiliaries, adverbs, verbs.
VERBISH = frozenset("""
is are was were be been can could will would shall should may might must has have had do does did best most least
likely correctly describes describe explains explain shows show causes cause represents represent contains
contain happens happen occurs occur helps help makes make uses use produces produce results result lives live
need needs want wants
""".split())
SUBORDINATORS = ("because", "although", "though", "while", "whereas", "when", "whenever", "if", "unless",
                 "after", "before", "since", "once")
PREPOSITIONS = ("in", "on", "at", "during", "for", "by", "from", "with", "under", "over", "after", "before",
                "since", "across", "through", "throughout", "around", "near", "inside", "outside", "between")

_ABBREV = frozenset("mr mrs ms dr prof st mt no vs etc e.g i.e jan feb mar apr jun jul aug sep sept oct nov dec "
                    "u.s u.k inc ltd co corp gen sen rep gov lt col sgt capt jr sr fig approx al".split())
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_END = re.compile(r"[.!?]+[\"'”’)\]]*$")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’-]*")


# ---------------------------------------------------------------------------------------------------------
# Small helpers


def load_synonyms(path: Path = SYNONYMS) -> dict[str, str]:
    """The synonym list: {word or phrase: replacement}, '#' lines skipped."""
    out: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            word, replacement = line.split("\t")
            out[word.strip()] = replacement.strip()
    return out


# Frequent sentence openers that are not names (beside the stop words and the synonym list's words).
_OPENERS = frozenset("""
new old young first last next most many several both people men women scientists researchers students experts
officials farmers police doctors children water energy plants animals humans earth's light heat sound air food
scientific medical recent early late high low long short small large great good bad public private local
""".split())


@functools.cache
def _common_words() -> frozenset[str]:
    """Words that are not names: the stop words, frequent openers and every word of the synonym list."""
    words = set(STOPWORDS) | _OPENERS
    for k, v in load_synonyms().items():
        words.update(k.split() + v.split())
    return frozenset(words)


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _lower_first(s: str, context: str = "", answer: bool = False) -> str:
    """Lower-case the first letter unless the first word looks like a name or an acronym. An answer option
    ("Drag an edge of ...") is also lower-cased when its second word is lower-case (names come capitalised)."""
    m = _WORD.match(s)
    if not m:
        return s
    word = m.group(0)
    if word == "I" or not word[0].isupper() or (len(word) > 1 and not word[1:].islower()):
        return s
    low = re.split(r"['’]", word.lower())[0]
    second = _WORD.findall(s)[1:2]
    if (low in _common_words() or low.endswith(("ing", "ed", "ly")) or re.search(rf"\b{re.escape(low)}\b", context)
            or (answer and second and second[0].islower() and second[0] not in ("and", "or") and len(word) > 2)):
        return s[:1].lower() + s[1:]
    return s


def _split_end(sentence: str) -> tuple[str, str]:
    """(body, final punctuation) of a sentence; the punctuation is '.' when there is none."""
    m = _END.search(sentence)
    if m:
        return sentence[:m.start()].rstrip(), m.group(0)
    return sentence.rstrip(" ,;:"), "."


def _n_words(s: str) -> int:
    return len(_WORD.findall(s))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def _content_words(text: str) -> set[str]:
    return {w for w in _words(text) if len(w) > 2 and w not in STOPWORDS and not w.isdigit()}


def _ngrams(words: list[str], n: int = 8) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _shuffled(items: list, rng: random.Random) -> list:
    """A shuffled copy, never in the original order when two items differ."""
    out = list(items)
    rng.shuffle(out)
    if out == items and len(set(items)) > 1:
        out = items[1:] + items[:1]
    return out


# ---------------------------------------------------------------------------------------------------------
# The rewrite rules


def sentences(text: str) -> list[str]:
    """Split text into sentences at . ! ? followed by a capital, a digit or a quote (not after abbreviations)."""
    text = " ".join(text.split())
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        before = text[start:m.start()].split()
        token = before[-1].lstrip("\"'“‘(").lower() if before else ""
        if m.group(0).startswith(".") and (token in _ABBREV or re.fullmatch(r"[a-z]", token)
                                           or re.fullmatch(r"(?:[a-z]\.)+[a-z]", token)):
            continue
        out.append(text[start:m.end()].strip())
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def _shuffle_clauses(sentence: str, rng: random.Random) -> str:
    body, end = _split_end(sentence)
    parts = [p.strip() for p in re.split(r"[,;] ", body) if p.strip()]
    if len(parts) < 2:
        return sentence
    parts[0] = _lower_first(parts[0], body)
    new = _shuffled(parts, rng)
    return _cap(", ".join(new)) + end


def reorder_sentences(text: str, rng: random.Random) -> str:
    """Shuffle the sentences of each paragraph and the paragraphs; one sentence: shuffle its clauses."""
    paras = [sentences(p) for p in _paragraphs(text)]
    if not paras:
        return text
    if len(paras) == 1 and len(paras[0]) == 1:
        moved = _reorder_sentence(paras[0][0])
        return moved if moved != paras[0][0] else _shuffle_clauses(paras[0][0], rng)
    return "\n\n".join(_shuffled([" ".join(_shuffled(p, rng)) for p in paras], rng))


def _article(word: str, like: str) -> str:
    """'a' or 'an' before word, cased like the article it replaces."""
    w = word.lower()
    if w.startswith(("hour", "honest", "honour", "heir")):
        an = True
    elif w.startswith(("uni", "use", "usu", "eu", "one", "once", "ur")):
        an = False
    else:
        an = w[:1] in "aeiou"
    out = "an" if an else "a"
    return _cap(out) if like[:1].isupper() else out


def _at_sentence_start(text: str, i: int) -> bool:
    before = text[:i].rstrip(" \t\"'“‘(")
    return not before or before.endswith("\n") or bool(re.search(r"[.!?:][\"'”’)]*$", before))


def swap_synonyms(text: str, synonyms: dict[str, str], share: float = 1.0) -> str:
    """Replace whole words and phrases from the synonym list, longest first, keeping a capitalised first letter."""
    if not synonyms:
        return text
    keys = sorted(synonyms, key=lambda k: (-len(k), k))
    alternatives = "|".join(re.escape(k).replace(r"\ ", r"\s+") for k in keys)
    # whole words: not inside a hyphenated compound or a contraction; an article before the word is taken along
    pattern = re.compile(rf"(?<![\w-])(?<!\w['’])(?:(?P<art>[Aa]n?) )?(?P<word>{alternatives})(?![\w-])(?!['’]\w)",
                         re.IGNORECASE)

    def replace(m: re.Match) -> str:
        word, art = m.group("word"), m.group("art")
        key = " ".join(word.lower().split())
        if share < 1 and zlib.crc32(f"{key}:{m.start('word')}".encode()) % 10_000 >= share * 10_000:
            return m.group(0)
        if word == word.lower():
            new = synonyms[key]
        elif word[0].isupper() and word[1:] == word[1:].lower() and not art and _at_sentence_start(text, m.start()):
            new = _cap(synonyms[key])
        else:
            return m.group(0)
        if art and art.lower() in ("a", "an") and m.group(0)[:len(art)] == art:
            return _article(new, art) + " " + new
        return new

    return pattern.sub(replace, text)


_INNER_CLAUSE = re.compile(
    r", (?:which|who|whose|where|when|while|although|though|including|especially|particularly|such as|like|"
    r"according to|for example|for instance|however|meanwhile|in|on|at|with|from|by|after|before|during|as|"
    r"a|an)\b[^,;:()\"“”]{3,160}?,(?=\s)(?! (?:and|or)\b)")
_TRAILING_CLAUSE = re.compile(
    r"(?:, (?:which|because|although|though|while|whereas|since|unless|so that|after|before|when|including|"
    r"despite|but|as well as)| (?:because|although|whereas|so that))\b[^.!?\"“”;:]*$")
_PARENTHESIS = re.compile(r" ?\([^()]*\)")
_SPEECH = frozenset("says said say that thinks believes told suggests reports warns claims argues adds added".split())


def _clause_spans(body: str) -> list[tuple[int, int]]:
    spans = [m.span() for m in _PARENTHESIS.finditer(body)]
    spans += [(m.start(), m.end() - 1) for m in _INNER_CLAUSE.finditer(body)]  # keep the closing comma's place
    spans += [m.span() for m in _TRAILING_CLAUSE.finditer(body)]
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if not out or s >= out[-1][1]:
            out.append((s, e))
    return out


def _remove(body: str, spans: list[tuple[int, int]]) -> str:
    for s, e in sorted(spans, reverse=True):
        rest = body[e:]
        if rest.startswith(",") and not rest[1:2] in ("\"", "”"):  # an inner clause: ", X," -> ""
            rest = rest[1:]
        body = body[:s] + rest
    body = re.sub(r"\s+([,.;:!?])", r"\1", re.sub(r"\s{2,}", " ", body))
    return body.strip(" ,;")


def _without(paras: list[list[tuple[str, str]]], chosen: dict) -> str:
    out = []
    for i, p in enumerate(paras):
        sents = []
        for j, (body, end) in enumerate(p):
            new = _remove(body, chosen.get((i, j), [])) if chosen.get((i, j)) else body
            last = _WORD.findall(new)[-1:]
            if _n_words(new) < 5 or (last and last[0].lower() in _SPEECH):  # "X says." lost its complement
                new = body
            sents.append(_cap(new) + end)
        out.append(" ".join(sents))
    return "\n\n".join(out)


def drop_clauses(text: str, rng: random.Random, share: float = 0.3) -> str:
    """Remove parentheticals, comma-delimited clauses and trailing subordinate clauses (each with p=share)."""
    paras = [[_split_end(s) for s in sentences(p)] for p in _paragraphs(text)]
    spans = {(i, j): _clause_spans(body) for i, p in enumerate(paras) for j, (body, _) in enumerate(p)}
    unchanged = _without(paras, {})
    result = _without(paras, {key: [sp for sp in found if rng.random() < share] for key, found in spans.items()})
    if result == unchanged:  # nothing went: the first single clause that can go, in random order
        candidates = [(key, sp) for key, found in spans.items() for sp in found]
        for key, sp in rng.sample(candidates, len(candidates)):
            result = _without(paras, {key: [sp]})
            if result != unchanged:
                break
    return result if result.strip() else text


_LEADING_SUB = re.compile(rf"^((?:{'|'.join(SUBORDINATORS)}) [^,]+), (.+)$", re.IGNORECASE)
_LEADING_PREP = re.compile(rf"^((?:{'|'.join(PREPOSITIONS)}|according to) [^,]+), (.+)$", re.IGNORECASE)
# Only unambiguous subordinators move to the front ("after", "since", "before" are prepositions as often).
_TRAILING_SUB = re.compile(r"^(.+?),? ((?:because|although|though|whereas|unless|while) .+)$")
_COORDINATED = re.compile(rf"^(.+?), (and) ((?:{'|'.join(DETERMINERS)}|he|she|it|they|we|i|you|there|[A-Z][a-z]+)"
                          r"\b.+)$")
# A final phrase a question can open with: an infinitive of purpose after a participle ("used to keep ...",
# "needed to make ...", "in order to ..."), or a phrase of time, place or means ("during the winter").
_PARTICIPLE = r"(?:[a-z]+ed|made|built|done|taken|given|seen|kept|grown|known|found|put|set|worn|eaten|in order)"
_FRONTABLE = re.compile(rf"\b{_PARTICIPLE} (to (?!(?:{'|'.join(DETERMINERS)})\b)[a-z]+ )"
                        rf"|[a-z] ((?:during|in|at|for|throughout) (?:{'|'.join(DETERMINERS)}) )")
_NOT_IN_FRONTED = re.compile(rf"\b(?:to|than|need|needs|want|wants|{'|'.join(SUBORDINATORS)})\b")


def _complete(part: str) -> bool:
    """A part that can stand at either end of a sentence: it does not end in a function word ("... is")."""
    last = _WORD.findall(part)[-1:]
    return bool(last) and re.split(r"['’]", last[0].lower())[0] not in STOPWORDS and "'" not in last[0]


def _clause_moves(sentence: str) -> list[str]:
    """Every rewrite of one sentence that a clause rule allows (module docstring, reorder_clauses)."""
    body, end = _split_end(sentence)
    question = end.startswith("?")
    if re.search(r"[\"“”]", body):  # quotations: left as they are
        return []
    out = []
    m = _LEADING_SUB.match(body)
    if m and _n_words(m.group(2)) >= 3 and _complete(m.group(2)) and ", then " not in m.group(2):
        main = re.sub(r"^then ", "", m.group(2))
        out.append(_cap(main) + " " + _lower_first(m.group(1), body) + end)
    m = _LEADING_PREP.match(body)
    if m and _n_words(m.group(1)) <= 6 and _n_words(m.group(2)) >= 3 and _complete(m.group(2)) and not question:
        out.append(_cap(m.group(2)) + " " + _lower_first(m.group(1), body) + end)
    m = _TRAILING_SUB.match(body)
    if m and _n_words(m.group(1)) >= 3 and _n_words(m.group(2)) >= 4 and _complete(m.group(1)) and not question:
        out.append(_cap(m.group(2)) + ", " + _lower_first(m.group(1), body) + end)
    m = _COORDINATED.match(body)
    if m and _n_words(m.group(1)) >= 3 and _n_words(m.group(3)) >= 3 and not question:
        out.append(_cap(m.group(3)) + ", " + m.group(2) + " " + _lower_first(m.group(1), body) + end)
    if question and "," not in body:  # a final infinitive or prepositional phrase goes to the front
        for m in _FRONTABLE.finditer(body):
            cut = m.start(1) if m.group(1) else m.start(2)
            head, tail = body[:cut].rstrip(), body[cut:]
            if head.endswith(" in order"):
                head, tail = head[:-len(" in order")], "in order " + tail
            if (_n_words(head) >= 3 and 3 <= _n_words(tail) <= 12 and _complete(head)
                    and not _NOT_IN_FRONTED.search(tail.split(" ", 2)[-1]) and not set(_words(tail)) & VERBISH):
                out.append(_cap(tail) + ", " + _lower_first(head, body) + end)
                break
    return out


def _reorder_sentence(sentence: str, rng: random.Random | None = None) -> str:
    """One sentence with a clause moved: rng picks among the rules that fit (without rng: the first)."""
    moves = _clause_moves(sentence)
    if not moves:
        return sentence
    return rng.choice(moves) if rng else moves[0]


def reorder_clauses(text: str, rng: random.Random) -> str:
    """Within each sentence, move a clause or phrase across a comma or a conjunction where a rule fits (rng
    picks the rule when several fit)."""
    return "\n\n".join(" ".join(_reorder_sentence(s, rng) for s in sentences(p)) for p in _paragraphs(text))


# ---------------------------------------------------------------------------------------------------------
# Benchmark items as prose


def _clean_question(question: str) -> str:
    return " ".join(re.sub(r"^\s*Question:\s*", "", question).split())


def _split_context(question: str) -> tuple[str, str]:
    """(leading context sentences, the last sentence: the question)."""
    sents = sentences(question)
    if len(sents) > 1:
        return " ".join(sents[:-1]), sents[-1]
    return "", question


def _is_clause(answer: str) -> bool:
    """Does the answer read as a clause (a subject and a finite verb) rather than a noun phrase?"""
    words = _words(answer)
    return len(words) >= 3 and any(w in {"is", "are", "was", "were", "will", "can", "has", "have", "had", "would",
                                         "could", "should", "may", "might", "does", "do", "did"} for w in words[1:])


_PRONOUNS = frozenset("you he she it they we i people someone somebody something one everyone anyone".split())
# Verbs that follow a two-word subject ("What should the student do ...?"), telling where the subject ends.
_SUBJECT_VERBS = frozenset("""do be have use need find see get make feel want expect happen go put keep say know buy
look take learn observe conclude consider cause affect help produce become give""".split())


def _subject(words: list[str]) -> int:
    """How many of words form the subject of an inverted question ("should [the student] do ..."): a pronoun,
    a name (one or two capitalised words), a determiner and a noun followed by a common verb, or a plural noun
    followed by one or by an adverb; 0: unknown."""
    if not words:
        return 0
    first = words[0]
    if first.lower() in _PRONOUNS:
        return 1
    if first[:1].isupper() and first.lower() not in STOPWORDS | DETERMINERS:
        return 2 if len(words) > 2 and words[1][:1].isupper() else 1
    if first.lower() in DETERMINERS and len(words) > 2 and words[2].lower() in _SUBJECT_VERBS:
        return 2
    after = words[1].lower() if len(words) > 1 else ""
    if (re.fullmatch(r"[a-z]+[^su]s", first) and first not in STOPWORDS  # a plural noun: "would animals most ..."
            and (after in _SUBJECT_VERBS or after.endswith("ly") or after in ("most", "more", "usually", "often"))):
        return 1
    return 0


def _third_person(verb: str) -> str:
    """The third person singular of a verb in its base form."""
    irregular = {"have": "has", "do": "does", "go": "goes", "be": "is"}
    if verb in irregular:
        return irregular[verb]
    if re.search(r"(?:s|sh|ch|x|z|o)$", verb):
        return verb + "es"
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ies"
    return verb + "s"


_AUX = frozenset("is are was were can could will would shall should may might must has have had do does did".split())


def _verb_phrase(rest: str, max_noun_words: int) -> tuple[str, str] | None:
    """Split 'NOUN... VERB REST' at the first VERBISH word: (noun words, verb phrase). None when there is none,
    when the noun is a function word ("What else could ..."), or when an auxiliary is followed by its subject
    (an inverted question: "Which gas can plants absorb?")."""
    words = rest.split()
    for i, w in enumerate(words[:max_noun_words + 1]):
        if w.lower() in VERBISH:
            if i and words[0].lower() in STOPWORDS | {"else"}:
                return None
            after = words[i + 1] if i + 1 < len(words) else ""
            subject_next = (after.lower() in DETERMINERS | _PRONOUNS or after[:1].isupper()
                            or re.search(r"[^su]s$", after))  # "can plants absorb": a plural noun
            if w.lower() in {"is", "are", "was", "were"}:  # "Which gas is the sun made of?": a dangling end
                subject_next = subject_next and re.search(r"\b(?:of|from|in|on|to|with|for|by|at|about|\w+ed|\w+ing)$",
                                                          rest)
            if w.lower() in _AUX and subject_next:
                return None
            return " ".join(words[:i]), " ".join(words[i:])
    return None


def _statement(q: str, answer: str) -> str:
    a = " ".join(answer.split())
    a_bare = a.rstrip(".").strip()
    a_low = _lower_first(a_bare, q, answer=True)
    if a.endswith(("?", "!")):  # an answer that is itself a question or an exclamation: quoted
        a_bare = a_low = f'"{a}"'
    body, end = _split_end(q)
    # 1. a blank
    if re.search(r"_{1,}", q):
        filled = re.sub(r"_{1,}", lambda _: a_bare, q, count=1)
        return filled if _END.search(filled) else filled + "."
    # 2. how-to goals (PIQA): "How to X." -> "To X, y."
    m = re.match(r"^How to (.+)$", body)
    if m:
        return f"To {m.group(1)}, {a_low}."
    # 2. no question mark: the answer completes the sentence
    if not end.startswith("?"):
        stem = q.rstrip().rstrip(":;-–—…").rstrip()
        follow = _cap(a_bare) if _END.search(stem) else a_low  # a goal sentence ("Bathe a dog.") then the answer
        return f"{stem} {follow}" + ("" if follow.endswith(('"', "!", "?")) else ".")
    # 3. how-to questions (PIQA): "How do I X?" -> "To X, y."; "What is the best way to X?"
    m = re.match(r"^(?:How (?:do|can|should|would|could|might) (?:I|you|we|one)(?! describe\b)"
                 r"|What is the best way to) (.+)$", body)
    if m:
        return f"To {m.group(1)}, {a_low}."
    # 3. What/Who is X?
    m = re.match(r"^(?:What|Who) (is|are|was|were) (.+)$", body)
    if m and (m.group(2).split()[0].lower() in DETERMINERS | {"something", "someone"} or _n_words(m.group(2)) <= 3):
        copula = m.group(1) + (" that" if _is_clause(a_bare) else "")
        return f"{_cap(m.group(2))} {copula} {a_low}."
    # 4. Which of the following ...?
    m = re.match(r"^Which of (?:the following|these)(?: (.+))?$", body, re.IGNORECASE)
    if m and m.group(1):
        split = _verb_phrase(m.group(1).lstrip(", "), 4)
        if split and split[1].split()[0].lower() not in ("do", "does", "did") and split[0].lower() not in STOPWORDS:
            tail = split[1]
            if (not _is_clause(a_bare) and _n_words(a_bare) <= 5 and not a_bare.startswith('"')
                    and tail.split()[0].lower() not in ("best", "describes", "explains", "correctly")):
                return f"{_cap(a_bare)} {tail}."
            return f"The one that {tail}: {a_low}."
    # 5. Which/What NOUN VERB ...?
    m = re.match(r"^(?:Which|What) (.+)$", body)
    if m:
        split = _verb_phrase(m.group(1), 5)
        if split and split[0] and split[1].split()[0].lower() not in ("do", "does", "did"):
            noun, tail = split
            plural = tail.split()[0].lower() in ("are", "were", "have", "do") or (
                tail.split()[0].lower() in _AUX - {"is", "was", "has", "does"} and re.search(r"[^su]s$", noun))
            copula = "are" if plural else "is"
            copula += " that" if _is_clause(a_bare) else ""
            return f"The {_lower_first(noun, q)} that {tail} {copula} {a_low}."
    # 6. social situations (SIQA)
    m = re.match(r"^How would you describe (.+)$", body)
    if m:
        return f"{_cap(m.group(1))} could be described as {a_low}."
    m = re.match(r"^How (?:would|will|might|did|does|do) (.+?) feel(.*)$", body)
    if m:
        return f"{_cap(m.group(1))} would feel {a_low}{m.group(2)}."
    m = re.match(r"^What (will|would|might|does|did) (.+?) (want|need|have) to do(.*)$", body)
    if m:
        aux, subject, verb, rest = m.groups()
        past = {"want": "wanted", "need": "needed", "have": "had"}
        third = {"want": "wants", "need": "needs", "have": "has"}
        phrase = {"does": third[verb], "did": past[verb]}.get(aux, f"{aux} {verb}")
        lead = _cap(rest.strip()) + ", " if rest.strip() else ""
        return f"{lead}{subject if lead else _cap(subject)} {phrase} to {_lower_first(a_bare, 'x', answer=True)}."
    # 7. What/Where/Why with an auxiliary and a recognisable subject: the question un-inverted
    because = "because" if _is_clause(a_bare) or _n_words(a_bare) > 3 else "because of"
    m = re.match(r"^Why is it that (.+)$", body)
    if m:
        return f"{_cap(m.group(1))} {because} {a_low}."
    m = re.match(r"^(What|Where|Why) (is|are|was|were|can|could|will|would|should|might|must|may|do|does) (.+)$", body)
    n = _subject(m.group(3).split()) if m else 0
    if m and n and len(m.group(3).split()) > n:
        wh, aux, words = m.group(1), m.group(2), m.group(3).split()
        subject = " ".join(w if w == "I" or w[0].isupper() and w.lower() not in _PRONOUNS else w.lower()
                           for w in words[:n])
        rest = words[n:]
        verb = {"do": rest, "does": [_third_person(rest[0])] + rest[1:]}.get(aux, [aux] + rest)
        clause = f"{subject} {' '.join(verb)}"
        copula = "is that" if _is_clause(a_bare) else "is"
        if wh == "What":
            return f"What {clause} {copula} {a_low}."
        if wh == "Where":
            return f"A place where {clause} {copula} {a_low}."
        if re.match(r"^(?:because|since|so|to|in order|as)\b", a_low):
            return f"{_cap(clause)} {a_low}."
        return f"{_cap(clause)} {because} {a_low}."
    # 8. anything else
    return f"{body}: the answer is {a_low}."


def question_to_statement(question: str, answer: str) -> str:
    """A benchmark question and its gold answer as one declarative sentence (rules 1-8, module docstring)."""
    context, q = _split_context(_clean_question(question))
    lead = re.match(r"^(.+?, )((?:what|which|who|where|why|how) .+\?)$", q)  # "If X, what ...?": rules on "what ..."
    if lead and "_" not in q:
        statement = lead.group(1) + _lower_first(_statement(_cap(lead.group(2)), answer), "x")
    else:
        statement = _statement(q, answer)
    statement = _cap(statement)
    return f"{context} {statement}" if context else statement


def _option(text: str) -> str:
    t = " ".join(text.split()).rstrip(".")
    return f'"{t}"' if "," in t or _n_words(t) > 6 else t


def options_in_prose(question: str, choices: list[str], gold: int) -> str:
    """The question restated with every option spelled out in prose and the correct one named."""
    context, q = _split_context(_clean_question(question))
    body, end = _split_end(q)
    options = [_option(c) for c in choices]
    listed = ", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1 else options[0]
    right = options[gold]
    if "_" in q:
        asked = f'to fill the blank in "{q}"'
    elif not end.startswith("?"):
        asked = f'to complete "{body.rstrip(":;-–— ")}"'
    elif re.match(r"^(?:which|what|who|whom|whose|where|when|why|how)\b", body, re.IGNORECASE):
        asked = _lower_first(body, "x")
    else:
        asked = f'"{body}?"'
    if zlib.crc32(q.encode()) % 2 == 0:
        prose = f"Asked {asked}, with the options {listed}, the right one is {right}."
    else:
        prose = f"Given the options {listed}, the answer when asked {asked} is {right}."
    return f"{context} {prose}" if context else prose


# ---------------------------------------------------------------------------------------------------------
# Real text from ../shared/data


def _abc_stories(shared_data: Path, name: str) -> list[str]:
    """ABC news stories (science or rural) as one line each: headlines and sub-headings (short lines without a
    full stop) left out, a long summary line without one given a full stop."""
    text = gzip.open(shared_data / f"text/news/nltk_abc/{name}.txt.gz", "rt", encoding="latin-1").read()
    stories = []
    for block in text.split("\n\n"):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        lines = [ln if _END.search(ln) else ln + "." for ln in lines if _END.search(ln) or _n_words(ln) >= 20]
        if lines:
            stories.append(" ".join(lines))
    return stories


def _detokenize(line: str) -> str:
    s = " ".join(line.split())
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    s = re.sub(r" ([.,;:!?%)\]])", r"\1", s)
    s = re.sub(r"([(\[$]) ", r"\1", s)
    s = re.sub(r" ('s|'re|'ve|'ll|'d|'m|n't)\b", r"\1", s)
    return re.sub(r'" ([^"]*?) "', r'"\1"', s)


def _wiki_articles(shared_data: Path) -> list[list[str]]:
    """WikiText-2 (raw test split) articles: their paragraphs, headings left out."""
    articles: list[list[str]] = []
    path = shared_data / "text/wikitext-2/wiki.test.raw.blanklines_stripped_crlf"
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^ = [^=].* = $", line):
            articles.append([])
        elif line.strip() and not line.strip().startswith("=") and articles:
            articles[-1].append(_detokenize(line))
    return [a for a in articles if a]


def _articles(shared_data: Path, rng: random.Random) -> list[str]:
    """ABC stories of >= 600 characters joined into articles of 3-6 paragraphs, and WikiText-2 articles."""
    out = []
    for name in ("science", "rural"):
        paras = [s for s in _abc_stories(shared_data, name) if len(s) >= 600]
        i = 0
        while i + 3 <= len(paras):
            k = rng.randint(3, 6)
            out.append("\n\n".join(paras[i:i + k]))
            i += k
    for paras in _wiki_articles(shared_data):
        paras = [p for p in paras if len(p) >= 200]
        if len(paras) >= 3:
            out.append("\n\n".join(paras[:rng.randint(3, 6)]))
    rng.shuffle(out)
    return out


def _lead(text: str) -> str:
    """The first third of an article's sentences, its paragraphs kept."""
    paras = [sentences(p) for p in _paragraphs(text)]
    want = max(1, math.ceil(sum(map(len, paras)) / 3))
    out = []
    for p in paras:
        if want <= 0:
            break
        out.append(" ".join(p[:want]))
        want -= len(p[:want])
    return "\n\n".join(out)


# Templated pages: the same template, different facts.
_TOWNS = ["Dubbo", "Bendigo", "Toowoomba", "Mildura", "Wagga Wagga", "Ballarat", "Bundaberg", "Tamworth", "Orange",
          "Geraldton", "Launceston", "Cairns", "Mackay", "Albury", "Shepparton", "Broken Hill", "Kalgoorlie",
          "Port Augusta", "Armidale", "Griffith", "Warrnambool", "Rockhampton", "Bathurst", "Horsham"]
_STATES = ["New South Wales", "Victoria", "Queensland", "South Australia", "Western Australia", "Tasmania"]
_WEATHER = ["Sunny", "Mostly sunny", "Partly cloudy", "Cloudy", "Showers", "Possible thunderstorm", "Light rain",
            "Fog then sunny", "Windy with showers", "Hazy sunshine"]
_DIRS = ["north", "north-east", "east", "south-east", "south", "south-west", "west", "north-west"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_BRANDS = ["Kestrel", "Northwind", "Alder & Finch", "Bluegum", "Corvid", "Halcyon", "Marlin", "Tidewater"]
_PRODUCTS = [("cordless drill", ["a brushless motor", "two lithium batteries", "a 13 mm keyless chuck",
                                 "an LED work light", "20 torque settings"]),
             ("espresso machine", ["a 15-bar pump", "a steam wand", "a removable water tank",
                                   "a built-in grinder", "a stainless steel boiler"]),
             ("hiking backpack", ["a rain cover", "padded hip belts", "a hydration sleeve", "adjustable straps",
                                  "a ventilated back panel"]),
             ("robot vacuum", ["laser mapping", "a self-emptying base", "app control", "edge brushes",
                               "a HEPA filter"])]
_COLOURS = ["black", "graphite", "forest green", "navy", "red", "silver", "white", "sand"]
_TEAMS = ["Eagles", "Hawks", "Tigers", "Magpies", "Swans", "Lions", "Kangaroos", "Bulldogs", "Saints", "Dockers",
          "Crows", "Suns"]
_PEOPLE = ["Sam Whitfield", "Jordan Reyes", "Mia Callaghan", "Tom Okafor", "Lachlan Price", "Ella Nguyen",
           "Josh Bennett", "Ruby Hartley", "Ben Castellano", "Zoe Fitzgerald", "Noah Kerrigan", "Chloe Abbott"]
_INDUSTRIES = ["agriculture", "mining", "tourism", "health care", "education", "manufacturing", "retail",
               "viticulture", "logistics", "fishing", "construction"]
_KNOWN = ["heritage gold-rush architecture", "its riverside parklands", "an annual agricultural show",
          "a historic railway station", "its wineries", "a regional art gallery", "its botanic gardens"]
_JOBS = [("Registered Nurse", "the emergency department"), ("Diesel Mechanic", "the heavy vehicle workshop"),
         ("Primary School Teacher", "a Year 3 class"), ("Accounts Officer", "the finance team"),
         ("Agronomist", "the cropping advisory service"), ("Electrician", "the maintenance crew")]


def _templated(kind: int, r: random.Random) -> str:
    """One page of template `kind` filled with facts drawn from r."""
    town, state = r.choice(_TOWNS), r.choice(_STATES)
    if kind == 0:
        hi = r.randint(12, 38)
        return (f"{town} weather forecast for {r.choice(_DAYS)} {r.randint(1, 28)} {r.choice(_MONTHS)}\n\n"
                f"Today: {r.choice(_WEATHER)}. Maximum {hi} degrees, minimum {hi - r.randint(6, 14)}. Winds "
                f"{r.choice(_DIRS)} {r.randint(5, 45)} km/h. Chance of any rain {r.randint(0, 19) * 5} per cent, "
                f"possible rainfall {r.randint(0, 12)} to {r.randint(13, 30)} mm.\n\n"
                f"Tomorrow: {r.choice(_WEATHER)}, maximum {hi + r.randint(-4, 4)} degrees. UV index "
                f"{r.randint(2, 13)}. Sunrise {r.randint(5, 7)}:{r.randint(10, 59)} am, sunset {r.randint(5, 8)}:"
                f"{r.randint(10, 59)} pm.\n\n"
                "Forecasts are issued by the regional forecasting centre and updated every three hours. For "
                "marine, fire weather and flood warnings see the warnings page. Observations are provisional and "
                "may be revised after quality control. Times are local.")
    if kind == 1:
        brand, (product, features), colour = r.choice(_BRANDS), r.choice(_PRODUCTS), r.choice(_COLOURS)
        model, price = f"{r.choice('ABCKMX')}{r.randint(100, 990)}", r.randint(49, 899)
        f1, f2 = r.sample(features, 2)
        return (f"{brand} {product} {model} - {colour}\n\n"
                f"Price: ${price}.{r.choice(['00', '95', '99'])} (was ${price + r.randint(10, 150)}). In stock: "
                f"{r.randint(2, 60)} units. Ships in {r.randint(1, 7)} business days.\n\n"
                f"The {brand} {product} {model} comes with {f1} and {f2}. Weight: {r.randint(400, 9000)} g. "
                f"Dimensions: {r.randint(10, 60)} x {r.randint(10, 60)} x {r.randint(5, 40)} cm. Warranty: "
                f"{r.randint(1, 5)} years. Customer rating {r.randint(30, 50) / 10} out of 5 from "
                f"{r.randint(3, 900)} reviews.\n\n"
                "Free delivery on orders over $50. Returns are accepted within 30 days of purchase with proof of "
                "purchase. Prices include GST. Add to cart. Add to wishlist. Compare with similar products.")
    if kind == 2:
        t1, t2, t3 = r.sample(_TEAMS, 3)
        p1, p2 = r.sample(_PEOPLE, 2)
        s1, s2 = r.randint(60, 130), r.randint(40, 110)
        w, lose = (t1, t2) if s1 >= s2 else (t2, t1)
        return (f"Round {r.randint(1, 23)}: {t1} {s1} v {t2} {s2}\n\n"
                f"The {w} beat the {lose} by {abs(s1 - s2)} points at {town} Oval on {r.choice(_DAYS)} in front "
                f"of a crowd of {r.randint(3, 45) * 1000 + r.randint(0, 999)}. {p1} kicked {r.randint(2, 7)} goals "
                f"and {p2} had {r.randint(15, 40)} disposals. The {w} move to "
                f"{r.choice(['first', 'second', 'fourth', 'sixth', 'ninth'])} on the ladder.\n\n"
                f"Next round: the {t1} play the {t3} on {r.choice(_DAYS)} at {r.randint(1, 7)}:"
                f"{r.choice(['10', '40', '45'])} pm. "
                "Tickets are on sale now. Full fixtures, results, ladder and player statistics are available on "
                "the competition website and app. Match reports are updated after the final siren.")
    if kind == 3:
        i1, i2, i3 = r.sample(_INDUSTRIES, 3)
        return (f"{town}, {state}\n\n"
                f"Population: {r.randint(8, 120) * 1000 + r.randint(0, 999)} (2021 census). Area: "
                f"{r.randint(50, 9000)} square kilometres. Elevation: {r.randint(5, 900)} m above sea level. "
                f"Median household income: ${r.randint(900, 2100)} per week. Main industries: {i1}, {i2} and "
                f"{i3}.\n\n"
                f"{town} lies {r.randint(80, 900)} km {r.choice(_DIRS)} of the state capital. The town was "
                f"founded in {r.randint(1820, 1910)} and is known for {r.choice(_KNOWN)}. Average maximum "
                f"temperature {r.randint(25, 36)} degrees in January and {r.randint(10, 19)} degrees in July; "
                f"annual rainfall {r.randint(250, 1400)} mm.\n\n"
                f"Local government: {town} Regional Council. Postcode: {r.randint(2000, 7999)}. Nearby towns: "
                f"{', '.join(r.sample([t for t in _TOWNS if t != town], 2))}. Visitor information centre open daily "
                "from 9 am to 5 pm.")
    job, unit = r.choice(_JOBS)
    return (f"{job} - {town}, {state}\n\n"
            f"Full time, {r.choice(['permanent', 'fixed term 12 months', 'fixed term 6 months'])}. Salary "
            f"${r.randint(60, 130)},000 plus superannuation. Closing date: {r.randint(1, 28)} {r.choice(_MONTHS)}.\n\n"
            f"We are looking for an experienced {job.lower()} to join {unit} at our {town} site. You will have "
            f"at least {r.randint(1, 6)} years of experience and a current driver licence. Contact "
            f"{r.choice(_PEOPLE)} on 0{r.randint(2, 8)} {r.randint(1000, 9999)} {r.randint(1000, 9999)} for more "
            "information.\n\n"
            "To apply, submit a cover letter and resume addressing the selection criteria. We are an equal "
            "opportunity employer and encourage applications from Aboriginal and Torres Strait Islander people. "
            "Only shortlisted applicants will be contacted.")


def _tfidf(texts: list[str]) -> sparse.csr_matrix:
    """Row-normalised TF-IDF matrix of the texts' content words (a row per text)."""
    counts = [Counter(w for w in _words(t) if len(w) > 2 and w not in STOPWORDS and not w.isdigit()) for t in texts]
    vocab = {w: k for k, w in enumerate(sorted({w for c in counts for w in c}))}
    df = Counter(w for c in counts for w in c)
    rows, cols, vals = [], [], []
    for i, c in enumerate(counts):
        weights = {w: n * math.log(len(texts) / df[w]) for w, n in c.items()}
        norm = math.sqrt(sum(x * x for x in weights.values())) or 1.0
        for w, x in weights.items():
            rows.append(i)
            cols.append(vocab[w])
            vals.append(x / norm)
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(vocab)))


def _same_topic(shared_data: Path, rng: random.Random, n: int, candidates: int = 300) -> list[tuple[str, str]]:
    """n pairs of distinct real ABC stories on one topic (half science, half rural): for `candidates` stories
    drawn at random, the other story whose content words overlap most (TF-IDF cosine); the most similar of
    these pairs, each story in one pair at most. Two stories sharing an 8-word run (one story told twice) are
    no pair."""
    pairs = []
    for name, count in (("science", (n + 1) // 2), ("rural", n // 2)):
        stories = [s for s in _abc_stories(shared_data, name) if 600 <= len(s) <= 4000]
        vectors = _tfidf(stories)
        grams = [_ngrams(_words(s)) for s in stories]
        anchors = rng.sample(range(len(stories)), min(candidates, len(stories)))
        similarity = (vectors[anchors] @ vectors.T).toarray()
        best = []
        for i, row in zip(anchors, similarity):
            row[i] = -1.0
            for j in row.argsort()[::-1][:5].tolist():
                if not grams[i] & grams[j]:
                    best.append((round(float(row[j]), 9), i, j))
                    break
        used: set[int] = set()
        for score, i, j in sorted(best, reverse=True):
            if len(used) == 2 * count:
                break
            if i not in used and j not in used:
                pairs.append((stories[i], stories[j]))
                used.update((i, j))
    return pairs


def labelled_pairs(shared_data: Path, per_kind: int = 40, seed: int = 0) -> list[dict]:
    """Labelled document pairs {"kind", "a", "b", "duplicate"} from real text, per_kind of each kind.

    Duplicates: "reordered" (sentences shuffled), "synonyms" (swapped from the list), "clauses_dropped",
    "rewritten" (all three), "lead" (an article and its first third of sentences). Not duplicates:
    "templated" (two pages of one template with different facts), "same_topic" (two real ABC stories whose
    words overlap most, see _same_topic)."""
    rng = random.Random(seed)
    synonyms = load_synonyms()
    articles = _articles(shared_data, rng)
    rows: list[dict] = []
    rules = {
        "reordered": lambda a: reorder_sentences(a, rng),
        "synonyms": lambda a: swap_synonyms(a, synonyms),
        "clauses_dropped": lambda a: drop_clauses(a, rng),
        "rewritten": lambda a: reorder_sentences(drop_clauses(swap_synonyms(a, synonyms), rng), rng),
        "lead": _lead,
    }
    k = 0
    for kind, rule in rules.items():
        done = 0
        while done < per_kind:
            a = articles[k % len(articles)]
            k += 1
            b = rule(a)
            if b != a:  # an article a rule cannot change is skipped
                rows.append({"kind": kind, "a": a, "b": b, "duplicate": True})
                done += 1
    for i in range(per_kind):
        template = i % 5
        a = _templated(template, rng)
        b = _templated(template, rng)
        rows.append({"kind": "templated", "a": a, "b": b, "duplicate": False})
    for a, b in _same_topic(shared_data, rng, per_kind):
        rows.append({"kind": "same_topic", "a": a, "b": b, "duplicate": False})
    return rows


# ---------------------------------------------------------------------------------------------------------
# Benchmark items

# (group, files): one quota per group; MMLU's share is spread over several subjects.
ITEM_SOURCES = [
    ("arc_easy", ["eval/llm_foundry/arc_easy.jsonl"]),
    ("arc_challenge", ["eval/llm_foundry/arc_challenge.jsonl"]),
    ("openbook_qa", ["eval/llm_foundry/openbook_qa.jsonl"]),
    ("commonsense_qa", ["eval/llm_foundry/commonsense_qa.jsonl"]),
    ("siqa", ["eval/llm_foundry/siqa.jsonl"]),
    ("piqa", ["eval/llm_foundry/piqa.jsonl"]),
    ("mmlu", [f"eval/mmlu/test/{s}_test.csv" for s in ("high_school_biology", "high_school_chemistry",
                                                        "high_school_physics", "high_school_psychology",
                                                        "high_school_microeconomics", "miscellaneous")]),
]
_OPTION_LINE = re.compile(r"^[ \t]*([A-Z])\.[ \t]+(.*?)[ \t]*$", re.M)
_LABEL = re.compile(r"^[ \t]*(?:Question|Context|Passage|Choices|Answer)[ \t]*:[ \t]*", re.M)


def _read_items(shared_data: Path, rel: str) -> list[tuple[int, str, list[str], int]]:
    """(row, question, choices, gold) of one benchmark file: llm_foundry JSONL or MMLU CSV with a header."""
    path = shared_data / rel
    out = []
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))[1:]
        for i, r in enumerate(rows):
            out.append((i, " ".join(r[0].split()), r[1:-1], int(r[-1])))
        return out
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        r = json.loads(line)
        query, choices, gold = r["query"], list(r["choices"]), int(r["gold"])
        options = dict(_OPTION_LINE.findall(query))
        if options and all(len(c) == 1 for c in choices):  # CSQA, SIQA: the options are in the query
            choices = [options.get(c, c) for c in choices]
            query = _OPTION_LINE.sub("", query)
        out.append((i, " ".join(_LABEL.sub("", query).split()), choices, gold))
    return out


def _usable(question: str, choices: list[str], gold: int) -> bool:
    answer = choices[gold]
    return (_n_words(question + " " + answer) >= 12 and len(question) <= 400 and len(choices) >= 2
            and "of the above" not in answer.lower() and "all of these" not in answer.lower()
            and len(answer) <= 200
            # a reformatting slip in some MMLU rows: a lone digit among worded options
            and (re.search(r"[A-Za-z]", answer) or not any(re.search(r"[A-Za-z]", c) for c in choices)))


def _rewrites(question: str, choices: list[str], gold: int, rng: random.Random,
              synonyms: dict[str, str]) -> dict[str, str]:
    answer = " ".join(choices[gold].split())
    if question.rstrip().endswith("?"):
        reordered = reorder_clauses(question, rng)
        if reordered == question:  # no clause to move: the answer leads
            reordered = f"{answer.rstrip('.')}: {question}"
        reordered += f"\n{answer}"
    else:  # a completion: the completed sentence, its clauses reordered
        completed = question_to_statement(question, answer)
        reordered = reorder_clauses(completed, rng)
        if reordered == completed:
            reordered = reorder_sentences(completed, rng)
    return {
        "reordered_clauses": reordered,
        "synonyms": swap_synonyms(f"{question}\n{answer}", synonyms),
        "statement": question_to_statement(question, answer),
        "options_prose": options_in_prose(question, choices, gold),
    }


def word_edits(a: str, b: str) -> int:
    """How many words differ between a and b, in order (lower-case words; a moved word counts)."""
    wa, wb = _words(a), _words(b)
    ops = difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def paraphrased_items(shared_data: Path, n: int = 120, seed: int = 0) -> list[dict]:
    """At least n real multiple-choice items over ITEM_SOURCES, four rewrites each (one row per rewrite).

    Items of at least 12 words (question and answer) are drawn at random, first among those whose synonym
    rewrite and statement each differ from the item in at least two words and whose clauses can be reordered,
    then among those with the two word changes (a completion's statement is the item itself: completions are
    drawn last, only to fill a quota)."""
    rng = random.Random(seed)
    synonyms = load_synonyms()
    quota = math.ceil(n / len(ITEM_SOURCES))
    rows = []
    for _, files in ITEM_SOURCES:
        per_file = [quota // len(files) + (1 if i < quota % len(files) else 0) for i in range(len(files))]
        for rel, want in zip(files, per_file):
            tiers: list[list] = [[], [], []]  # all three preferences met; the two word changes; neither
            for it in (it for it in _read_items(shared_data, rel) if _usable(*it[1:])):
                _, q, choices, gold = it
                text = f"{q}\n{choices[gold]}"
                statement = question_to_statement(q, choices[gold])
                probe = q if q.endswith("?") else statement
                changed = word_edits(text, swap_synonyms(text, synonyms)) >= 2 and word_edits(text, statement) >= 2
                movable = reorder_clauses(probe, random.Random(0)) != probe
                tiers[0 if changed and movable else 1 if changed else 2].append(it)
            picked = []
            for tier in tiers:
                picked += rng.sample(tier, min(want - len(picked), len(tier)))
            for row, q, choices, gold in sorted(picked):
                item_rng = random.Random(f"{seed}:{rel}:{row}")
                for kind, text in _rewrites(q, choices, gold, item_rng, synonyms).items():
                    rows.append({"benchmark_file": rel, "row": row, "question": q, "answer": choices[gold],
                                 "kind": kind, "text": text})
    return rows


def _clean_paragraphs(shared_data: Path) -> list[str]:
    """Clean real paragraphs of 300-1500 characters: WikiText-2 (raw) and ABC science and rural news."""
    paras = [p for a in _wiki_articles(shared_data) for p in a]
    paras += _abc_stories(shared_data, "science") + _abc_stories(shared_data, "rural")
    return [p for p in paras if 300 <= len(p) <= 1500]


def same_topic_documents(items: list[dict], shared_data: Path, n_per_item: int = 1) -> list[dict]:
    """For each item, the real paragraph(s) sharing the most content words with its question and answer (ties:
    the rarer shared words, by IDF over the paragraphs), not holding any 8-word run of it: rows
    {"item_row_key": "<benchmark_file>:<row>", "text"}. Paragraphs: _clean_paragraphs."""
    paras = _clean_paragraphs(shared_data)
    para_words = [_content_words(p) for p in paras]
    para_grams = [_ngrams(_words(p)) for p in paras]
    df = Counter(w for words in para_words for w in words)
    out = []
    for it in items:
        item_text = f"{it['question']} {it['answer']}"
        want, grams = _content_words(item_text), _ngrams(_words(item_text))
        idf = {w: math.log(len(paras) / (1 + df[w])) for w in want}
        scored = sorted((-len(want & words), -round(sum(idf[w] for w in want & words), 9), i)
                        for i, words in enumerate(para_words) if not grams & para_grams[i])
        for *_, i in scored[:n_per_item]:
            out.append({"item_row_key": f"{it['benchmark_file']}:{it['row']}", "text": paras[i]})
    return out


def main() -> None:
    """Regenerate tests/data/paraphrased_items.jsonl from ../shared/data and print its counts."""
    shared = ROOT.parent / "shared" / "data"
    rows = paraphrased_items(shared)
    ITEMS_FILE.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    items = {(r["benchmark_file"], r["row"]) for r in rows}
    print(f"{ITEMS_FILE.relative_to(ROOT)}: {len(items)} items from {len({f for f, _ in items})} files, "
          f"{len(rows)} rewrites")
    for kind, count in Counter(r["kind"] for r in rows).items():
        print(f"  {kind:18} {count}")
    for rel, count in sorted(Counter(f for f, _ in items).items()):
        print(f"  {rel:45} {count} items")


if __name__ == "__main__":
    sys.exit(main())
