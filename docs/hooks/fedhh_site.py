"""MkDocs hook: links from the documentation to files of the repository outside ``docs/``,
and the Sphinx roles of docstrings on the API pages.

The pages link to configs, examples, source files and benchmark figures by
relative paths (``../configs/studies``), which work wherever the Markdown is
read inside the repository.  On the site such a link becomes the path as
text (the site has no copy of those files), and an image is copied into the
site under ``repository/``.  A link to a path that does not exist in the
repository fails the build, as a broken link between pages does.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

_LINK = re.compile(r"(?P<image>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
_SITE_FOLDER = "repository"  # where images from outside docs/ are copied in the site


def _outside_docs(page: File, target: str) -> str | None:
    """The repository path a link of ``page`` points to when it leaves ``docs/``, else ``None``."""
    if "://" in target or target.startswith(("mailto:", "/")):
        return None
    path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page.src_uri), target))
    return None if path == "docs" or path.startswith("docs/") else path


def on_files(files: Files, config: MkDocsConfig) -> Files:
    repository = Path(config.docs_dir).parent
    for page in files.documentation_pages():
        for match in _LINK.finditer(Path(page.abs_src_path).read_text(encoding="utf-8")):
            path = _outside_docs(page, match["target"])
            if path is None:
                continue
            if path.startswith("../") or not (repository / path).exists():
                raise PluginError(f"{page.src_uri} links to {match['target']!r}: no such file in the repository")
            copy = f"{_SITE_FOLDER}/{path}"
            if match["image"] and files.get_file_from_path(copy) is None:
                files.append(File.generated(config, copy, abs_src_path=str(repository / path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def replace(match: re.Match[str]) -> str:
        path = _outside_docs(page.file, match["target"])
        if path is None:
            return match[0]
        if match["image"]:
            relative = posixpath.relpath(f"{_SITE_FOLDER}/{path}", posixpath.dirname(page.file.src_uri) or ".")
            return f"![{match['text']}]({relative})"
        text = match["text"]
        return text if path.rstrip("/") in text.replace("../", "") else f"{text} (`{path}`)"

    return _LINK.sub(replace, markdown)


_ROLE = re.compile(r":(?:func|class|data|mod|meth|attr|exc|obj):<code>(?P<tilde>~?)(?P<name>[^<]*)</code>")


def _code_name(match: re.Match[str]) -> str:
    name = match["name"].rpartition(".")[2] if match["tilde"] else match["name"]
    return f"<code>{name}</code>"


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Docstrings name code with Sphinx roles (:func:`schema`, :class:`~a.B`); the API pages show the name."""
    return _ROLE.sub(_code_name, html)
