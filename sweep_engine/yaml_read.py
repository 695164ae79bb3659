"""Reading a space file strictly: bytes that are not UTF-8 text, duplicate keys and keys
that are not strings are errors naming the file, the key path and the line.

Why not ``yaml.safe_load``: it lets the last of two equal keys win silently and reads
``on:``/``yes:``/``1:`` as a boolean or number key, so a typo changes a sweep without a
word. Here the document is composed into nodes first, checked node by node (each knows
its line), then constructed.

Two scalar rules of YAML 1.1 are adjusted, since a user means the number either way:
an unquoted ``1e-3`` or ``1.0e3`` (no dot, or no exponent sign: text in YAML 1.1) reads
as a float, and a quoted ``"5"``/``"0.1"``/``"true"`` reads as a ``Quoted`` string, so
the schema can refuse it by name where a number or flag is expected instead of
converting it silently (``trainables/spec.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainables.errors import ConfigError
from trainables.spec import Quoted

MERGE_TAG = "tag:yaml.org,2002:merge"  # ``<<: *anchor`` keys are YAML's, not the user's
FLOAT_TAG = "tag:yaml.org,2002:float"
# what a quoted scalar would have read as unquoted -> ``Quoted.kind``
PLAIN_KINDS = {"tag:yaml.org,2002:int": "int", FLOAT_TAG: "float", "tag:yaml.org,2002:bool": "bool"}
# floats YAML 1.1 reads as text: 1e-3, 5E4, 1.0e3, .5e-2 (it wants a dot and a signed exponent)
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")


class SpaceLoader(yaml.SafeLoader):
    """SafeLoader with the two scalar rules above; keys stay plain strings."""

    def construct_quoted_aware_str(self, node: ScalarNode) -> str:
        value = self.construct_scalar(node)
        if node.style in ('"', "'"):
            kind = PLAIN_KINDS.get(self.resolve(ScalarNode, node.value, (True, False)))
            if kind is not None:
                return Quoted(value, kind, node.style)
        return value

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        return {str(k) if isinstance(k, Quoted) else k: v for k, v in mapping.items()}


SpaceLoader.add_implicit_resolver(FLOAT_TAG, EXPONENT_FLOAT, list("-+.0123456789"))
SpaceLoader.add_constructor("tag:yaml.org,2002:str", SpaceLoader.construct_quoted_aware_str)


def read_text(path: Path) -> str:
    """The file as text; a ConfigError naming the encoding problem otherwise."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the file: {err.strerror or err}") from None
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise ConfigError(f"{path}: the file is UTF-16 encoded; allowed: UTF-8 text (re-save it)")
    if b"\x00" in data:
        where = data.index(b"\x00")
        raise ConfigError(
            f"{path}: a binary file (a NUL byte at offset {where}), not YAML; "
            "allowed: a UTF-8 text file"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: line {line}: byte {data[err.start]:#04x} at offset {err.start} is not "
            "UTF-8; allowed: a UTF-8 text file (re-save it as UTF-8)"
        ) from None


def load_yaml(path: Path) -> Any:
    """Parse ``path``: one YAML document, its mapping keys unique strings."""
    text = read_text(path)
    try:
        loader = SpaceLoader(text)  # its reader refuses control characters already
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_keys(node, "", loader, str(path), set())
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        text = str(err).replace('"<unicode string>"', str(path))
        raise ConfigError(f"{path}: not valid YAML: {text}") from None


def _check_keys(node: Node, path: str, loader: SpaceLoader, source: str, seen: set) -> None:
    """Walk the node tree; ``seen`` guards against aliases that point back up."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, SequenceNode):
        for i, child in enumerate(node.value):
            _check_keys(child, f"{path}[{i}]", loader, source, seen)
    elif isinstance(node, MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                _check_keys(value_node, path, loader, source, seen)
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            where = path or "top level"
            if not isinstance(key, str):
                raise ConfigError(
                    f"{source}: line {line}: {where}: key {key!r} is {_a(type(key).__name__)}, "
                    "not a string (YAML reads on/off/yes/no/true/false as booleans); "
                    f"allowed: string keys (quote it: '{key_node.value}')"
                )
            sub = f"{path}.{key}" if path else key
            if key in lines:
                raise ConfigError(
                    f"{source}: {sub}: duplicate key (lines {lines[key]} and {line}); "
                    "allowed: each key once per mapping"
                )
            lines[key] = line
            _check_keys(value_node, sub, loader, source, seen)


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word
