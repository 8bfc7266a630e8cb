"""Identity finishes every key: the one digest function lives in madara_cli/config/identity.py,
and ``hashlib`` appears elsewhere only where what it makes is no key of a result."""

from __future__ import annotations

import re

from tests.conftest import ROOT

# module -> what its hash makes (none of them names or keys a result)
NOT_KEYS = {
    "madara_cli/config/identity.py": "the one digest",
    "madara_cli/config/prompt_sets.py": "an in-process memo of a loaded set's text (prompt digests are identity's)",
    "madara_cli/core/records.py": "a request's sampling seed",
    "madara_cli/strategies/pde.py": "PDE-Random's seeded document draw",
    "madara_cli/experiment/launch.py": "the file name of a launcher's cell list",
    "madara_cli/composition/plugins.py": "the module name an --include file is imported under",
    "madara_cli/results/tracking.py": "a W&B run id",
    "madara_cli/retrievers/saved_index.py": "a saved index's numeric row ids",
}


def test_hashlib_only_where_it_makes_no_key():
    found = {p.relative_to(ROOT).as_posix() for p in (ROOT / "madara_cli").rglob("*.py")
             if re.search(r"^\s*import hashlib|hashlib\.", p.read_text(encoding="utf-8"), re.M)}
    assert found - set(NOT_KEYS) == set(), "a key made outside the identity room: hash it with madara_cli.config.identity.digest"
    assert set(NOT_KEYS) - found == set(), "the list names a module that no longer hashes: take it off"
