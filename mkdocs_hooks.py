"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml); not part of the package.

* Heading anchors are GitHub's, so a link such as ``placement.md#tensor-parallel-engines-tp--1`` works on GitHub and on
  the site alike (Python-Markdown's default slug collapses ``--``; pymdownx's drops ``<exp>`` in ``ckpt/<exp>/``).
* The package's docstrings use Sphinx roles (``:class:`X```); the API pages show them as plain code.
"""

from __future__ import annotations

import re

_NOT_IN_SLUG = re.compile(r"[^\w\- ]")
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const):(?=<code>)")


def gfm_slug(value: str, separator: str = "-") -> str:
    """The anchor GitHub gives a heading whose text is ``value``: lower case, every character other than a letter,
    digit, ``_``, ``-`` or space dropped, each space a hyphen."""
    return _NOT_IN_SLUG.sub("", value.strip().lower()).replace(" ", separator)


def on_config(config, **kwargs):
    config.mdx_configs.setdefault("toc", {})["slugify"] = gfm_slug
    return config


def on_page_content(html: str, **kwargs) -> str:
    return _ROLE.sub("", html).replace("<code>~", "<code>")
