"""docs/parameters.md is generated from the registry and kept current."""

from pathlib import Path

from wiremq.config.parameters import REGISTRY
from wiremq.config.reference import parameters_document

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "parameters.md"


def test_docs_parameters_md_is_the_registry_as_it_is():
    expected = parameters_document(REGISTRY)
    assert DOCUMENT.read_text() == expected, (
        "docs/parameters.md is out of date: .venv/bin/wiremq parameters > docs/parameters.md"
    )


def test_the_document_lists_every_parameter_once_with_whether_it_is_live():
    text = DOCUMENT.read_text()
    for parameter in REGISTRY:
        assert text.count(f"| {parameter.key} |") == 1, parameter.key
    live = [line for line in text.splitlines() if line.startswith("| ") and "| yes |" in line]
    assert len(live) == sum(1 for p in REGISTRY if p.live)
