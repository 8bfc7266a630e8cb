"""Digests of the prompt families a cell sends, for its identity.

A cell's key must change when a prompt it sends changes, or a cell finished before the
edit is reported as done. The words are the templates of the cell's prompt set
(``cfg.prompts``; :mod:`madara_cli.config.prompt_sets`) and the glue is in the request
builders, so a digest of the template files alone would miss edits of the builders.
Instead each family (:class:`~madara_cli.plugins.shape.PromptFamily`: the shipped
agents' in :mod:`madara_cli.agents.families`, the reranker's, a plug-in's) renders its
requests for a fixed sample in every mode it has, with the loaded set, and the digest is
the hash of those requests: an edit anywhere in a template file or a builder changes it,
and nothing else does (comments, docstrings, refactors, and a set of another name with
the same text keep the keys). A family without a sample renderer (a plug-in's) is
digested over its templates' texts as the set words them.

A cell sends the generator's family, the families its strategy's spec declares, and those
of its retriever's spec (the reranker's).
"""

from __future__ import annotations

from madara_cli.config.folders import shipped_prompt_set
from madara_cli.config.identity import digest, family_digest
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.plugins.catalog import CATALOG
from madara_cli.plugins.shape import PromptFamily

_DIGESTS: dict[tuple[str, str], str] = {}


def _family(name: str) -> PromptFamily:
    family = CATALOG.family(name)
    if family is None:
        raise ValueError(f"unknown prompt family '{name}'; valid: {', '.join(sorted(CATALOG.families()))}")
    return family


def prompt_digest(family: str, prompts: PromptSet | None = None) -> str:
    """sha256 (16 hex digits) of the family's requests rendered with ``prompts`` (the
    shipped set by default)."""
    ps = shipped_prompt_set() if prompts is None else prompts
    key = (family, ps.sha)
    if key not in _DIGESTS:
        fam = _family(family)
        if fam.sample is not None:
            _DIGESTS[key] = family_digest(fam.sample(ps))
        else:
            _DIGESTS[key] = digest([[t, ps.template(t).text] for t in sorted(fam.templates)], 16, ascii=False)
    return _DIGESTS[key]


def prompt_digests(strategy: str, retriever: str = "bm25s", prompts: PromptSet | None = None) -> dict[str, str]:
    """The digests of every family a cell of ``strategy`` (with ``retriever``) sends, in
    the words of ``prompts`` (the cell's set; the shipped one by default)."""
    families = ["generator"]
    for spec in (CATALOG.find("strategy", strategy), CATALOG.find("retriever", retriever)):
        families += [f for f in (spec.families() if spec is not None else ()) if f not in families]
    return {f: prompt_digest(f, prompts) for f in families}
