"""Web sites and pages: the boilerplate around a page's main content.

Every page of a site shares the same cookie banner, navigation, sidebar and footer, as on real sites;
that repetition is what boilerplate removal and line-level deduplication must cope with. A site's look
is drawn from its own random stream, so adding pages to one site never changes another.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from html import escape

from .markup import Block, main_text, render

DOMAIN = "sample.invalid"  # reserved top-level domain (RFC 2606): can never resolve

_NAV = [
    ("Documentation", "/docs/"), ("Tutorials", "/tutorials/"), ("API Reference", "/api/"), ("Blog", "/blog/"),
    ("Community", "/community/"), ("Download", "/download/"), ("Changelog", "/changelog/"), ("FAQ", "/faq/"),
    ("Support", "/support/"), ("Examples", "/examples/"), ("Install", "/install/"), ("News", "/news/"),
    ("Sponsors", "/sponsors/"), ("Contributing", "/contributing/"),
]
_FOOTER = [
    ("Privacy policy", "/privacy/"), ("Terms of use", "/terms/"), ("Contact", "/contact/"),
    ("Code of conduct", "/conduct/"), ("Security", "/security/"), ("Sitemap", "/sitemap.xml"),
    ("RSS feed", "/feed.xml"), ("Status", "/status/"), ("Imprint", "/imprint/"),
]
_COOKIE = [
    "We use cookies to improve your experience on this site. By continuing to browse, you agree to our use of cookies.",
    "This website uses cookies for analytics and to remember your preferences.",
    "Cookies help us deliver our documentation. By using this site you consent to the use of cookies.",
    "We value your privacy. We and our partners use cookies to measure traffic and personalise content.",
]
_COPYRIGHT = [
    "\u00a9 {year} {name} contributors. All rights reserved.",
    "Copyright \u00a9 {year} The {name} Authors. Content licensed under an open-source licence.",
    "\u00a9 {year} {name} developers \u00b7 Built with a static site generator.",
    "Copyright {year}, the {name} team. Last updated on {date}.",
]
_LAYOUTS = [("site-header", "main-nav", "container"), ("navbar", "navbar-menu", "page-wrapper"), ("top-bar", "menu", "content-grid")]


@dataclass(eq=False)
class Site:
    label: str  # host label: <label>.sample.invalid
    name: str  # display name
    seed: str  # seeds this site's look
    links: list[tuple[str, str]] = field(default_factory=list)  # project links for the sidebar
    pages: list[tuple[str, str]] = field(default_factory=list)  # (title, path) listed in the sidebar

    @property
    def host(self) -> str:
        return f"{self.label}.{DOMAIN}"

    def look(self) -> dict:
        r = random.Random(f"site:{self.seed}:{self.label}")
        nav = [("Home", "/")] + sorted(r.sample(_NAV, r.randint(4, 6)), key=_NAV.index)
        year = 2019 + r.randrange(6)
        return {
            "layout": r.choice(_LAYOUTS),
            "nav": nav,
            "cookie": r.choice(_COOKIE),
            "footer": sorted(r.sample(_FOOTER, r.randint(3, 5)), key=_FOOTER.index),
            "copyright": r.choice(_COPYRIGHT).format(year=year, name=self.name, date=f"{year}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"),
            "contents": r.choice(["Contents", "On this site", "Pages", "Navigation"]),
        }


@dataclass(eq=False)
class Page:
    site: Site
    path: str
    blocks: list[Block]  # starts with the page's h1
    kind: str = "normal"  # normal, readme/api origin, or the planted case it carries
    lang: str = "en"
    charset: str = "utf-8"  # how the HTML is encoded
    meta_charset: str | None = "utf-8"  # <meta charset=...> in the HTML, or None
    header_charset: str | None = "utf-8"  # charset parameter of the HTTP Content-Type, or None
    html: bytes | None = None  # set to reuse bytes verbatim (exact duplicates)

    @property
    def url(self) -> str:
        return f"https://{self.site.host}{self.path}"

    @property
    def title(self) -> str:
        return self.blocks[0].plain[0]

    @property
    def text(self) -> str:
        """The main text: what the page's <article> shows."""
        return main_text(self.blocks)

    @property
    def content_type(self) -> str:
        return "text/html" + (f"; charset={self.header_charset}" if self.header_charset else "")

    def render(self) -> bytes:
        if self.html is not None:
            return self.html
        # Characters the charset lacks (a "©" in Shift_JIS) become character references, as editors do.
        return render_html(self).encode(self.charset, errors="xmlcharrefreplace")


def _links(items) -> str:
    return "\n".join(f'<li><a href="{escape(h)}">{escape(t, quote=False)}</a></li>' for t, h in items)


def render_html(page: Page) -> str:
    site, look = page.site, page.site.look()
    header_cls, nav_cls, wrap_cls = look["layout"]
    meta = f'<meta charset="{page.meta_charset}">\n' if page.meta_charset else ""
    project = site.links or [("Source code", f"https://{site.host}/source/"), ("Issue tracker", f"https://{site.host}/issues/")]
    return f"""<!DOCTYPE html>
<html lang="{page.lang}">
<head>
{meta}<title>{escape(page.title, quote=False)} | {escape(site.name, quote=False)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/theme.css">
</head>
<body>
<div id="cookie-banner" class="cookie-banner"><p>{look["cookie"]} <a href="/privacy/">Learn more</a></p>
<button type="button">Accept all</button> <button type="button">Reject</button></div>
<header class="{header_cls}"><a class="brand" href="/">{escape(site.name, quote=False)}</a>
<nav class="{nav_cls}"><ul>
{_links(look["nav"])}
</ul></nav>
</header>
<div class="{wrap_cls}">
<aside class="sidebar">
<h3>{look["contents"]}</h3>
<ul>
{_links(site.pages)}
</ul>
<h3>Project links</h3>
<ul>
{_links(project)}
</ul>
</aside>
<main id="content">
<article>
{render(page.blocks)}
</article>
</main>
</div>
<footer class="site-footer">
<ul>
{_links(look["footer"])}
</ul>
<p>{escape(look["copyright"], quote=False)}</p>
</footer>
</body>
</html>
"""
