"""URL block-lists and banned words in URLs (the first, cheapest filter in FineWeb and RefinedWeb).

Block-list files are in UT1's format (Université Toulouse 1 Capitole, squidGuard lists): one entry a
line, `#` comments, optionally gzipped.
- domain files: a listed domain blocks itself and every subdomain (casino.com blocks www.casino.com);
- URL files: a listed `host/path` blocks that page and everything below it, on the host and its
  subdomains, matched at path-segment boundaries (`site.com/en` blocks site.com/en and site.com/en/x, not
  site.com/english). Scheme, case and a trailing slash are ignored.
Banned words follow datatrove's URLFilter: the URL is split at every non-alphanumeric character and
- any `banned_url_words` token drops the document,
- `soft_banned_url_word_threshold` or more distinct `soft_banned_url_words` tokens drop it,
- any `banned_url_subwords` entry inside the URL with its non-alphanumerics removed drops it (for words
  that hide inside others: "freeporn").
Word-list files take one word a line, `#` lines skipped, like datatrove's assets.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from urllib.parse import urlsplit

from tokenmill.filters.params import Blocklists


_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def read_list(path: str | Path) -> list[str]:
    """Non-blank, non-comment lines of a (possibly gzipped) list file, stripped."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return [s for s in (line.strip() for line in f) if s and not s.startswith("#")]


def _normalise_word(word: str) -> str:
    return _NON_ALNUM.sub("", word.lower())


def _words(inline: list[str], files: list[str]) -> set[str]:
    words = {_normalise_word(w) for w in inline}
    for f in files:
        words.update(_normalise_word(w) for w in read_list(f))
    words.discard("")
    return words


def _strip_url(entry: str) -> str:
    """'HTTP://Site.com/Path/' -> 'site.com/path'."""
    entry = entry.strip().lower()
    if "://" in entry:
        entry = entry.split("://", 1)[1]
    return entry.rstrip("/")


def _host_suffixes(host: str) -> list[str]:
    """'a.b.com' -> ['a.b.com', 'b.com', 'com']."""
    labels = host.split(".")
    return [".".join(labels[i:]) for i in range(len(labels))]


class UrlFilter:
    def __init__(self, cfg: Blocklists):
        self.domains: set[str] = set()
        for f in cfg.domain_files:
            self.domains.update(d.lower().lstrip("*.").rstrip(".") for d in read_list(f))
        self.urls: set[str] = set()
        for f in cfg.url_files:
            self.urls.update(_strip_url(u) for u in read_list(f))
        self.url_hosts = {u.split("/", 1)[0] for u in self.urls}
        self.banned = _words(cfg.banned_url_words, cfg.banned_url_word_files)
        self.soft = _words(cfg.soft_banned_url_words, cfg.soft_banned_url_word_files)
        self.soft_threshold = cfg.soft_banned_url_word_threshold
        subwords = _words(cfg.banned_url_subwords, cfg.banned_url_subword_files)
        self.subwords = re.compile("|".join(map(re.escape, sorted(subwords)))) if subwords else None

    def check(self, url: str) -> tuple[str, str] | None:
        """None when the URL passes, else (reason, what matched): reason url_blocklist or url_banned_word."""
        try:
            parts = urlsplit(url.strip() if "://" in url else "http://" + url.strip())
            host = (parts.hostname or "").rstrip(".")
        except ValueError:  # e.g. an invalid IPv6 literal: no host to look up, the words still count
            parts, host = None, ""
        if host:
            suffixes = _host_suffixes(host)
            for s in suffixes:
                if s in self.domains:
                    return "url_blocklist", f"domain:{s}"
            if self.urls:
                hit = self._url_hit(suffixes, parts)
                if hit:
                    return "url_blocklist", f"url:{hit}"
        tokens = set(_NON_ALNUM.split(url.lower()))
        hard = sorted(tokens & self.banned)
        if hard:
            return "url_banned_word", f"word:{hard[0]}"
        soft = sorted(tokens & self.soft)
        if self.soft and len(soft) >= self.soft_threshold:
            return "url_banned_word", "soft:" + ",".join(soft)
        if self.subwords is not None:
            m = self.subwords.search(_NON_ALNUM.sub("", url.lower()))
            if m:
                return "url_banned_word", f"subword:{m.group(0)}"
        return None

    def _url_hit(self, suffixes: list[str], parts) -> str | None:
        path = parts.path.lower().rstrip("/")
        if parts.query:
            path += "?" + parts.query.lower()
        # Prefixes at segment boundaries: "", "/a", "/a/b", ... and the full path with its query.
        prefixes = [""]
        i = path.find("/", 1)
        while i != -1:
            prefixes.append(path[:i])
            i = path.find("/", i + 1)
        if path:
            prefixes.append(path)
        for host in suffixes:
            if host in self.url_hosts:
                for p in prefixes:
                    if host + p in self.urls:
                        return host + p
        return None
