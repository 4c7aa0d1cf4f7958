"""YAML documents that remember where each value came from, so that every complaint about a
scenario or an inventory names file and line.

pydantic reports a location as a tuple of keys and indexes; `Source.line_of(loc)` maps it to the
line of the deepest node that exists (an unknown key points at itself, a missing key at its
parent).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from runner.errors import InputError, plain_message
from runner.fsutil import read_bytes

MAX_BYTES = 1_000_000
MAX_DEPTH = 40
MAX_NODES = 50_000  # counted with aliases expanded: a "billion laughs" file stops here


@dataclass(frozen=True)
class Source:
    path: Path
    data: Any
    lines: dict[tuple[Any, ...], int]

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        for n in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:n]))
            if line is not None:
                return line
        return None

    def validation_error(
        self, exc: pydantic.ValidationError, error_cls: type[InputError], hint: str
    ) -> InputError:
        """The first error of a pydantic failure, as one clear message with file:line."""
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        # drop discriminated-union tags that pydantic inserts into locations; the last part is
        # the field at fault, even when a tag has its name (a playbook step's `playbook`)
        loc = tuple(p for i, p in enumerate(loc) if p not in _UNION_TAGS or i == len(loc) - 1)
        # a mapping's key at fault: the key itself is the field (pydantic adds "[key]")
        loc = tuple(p for p in loc if p != "[key]")
        field = ".".join(str(p) for p in loc) or None
        msg = plain_message(err)
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not part of the format; check its spelling)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        more = len(exc.errors()) - 1
        if more:
            msg += f" (and {more} more problem{'s' if more > 1 else ''})"
        return error_cls(msg, file=self.path, line=self.line_of(loc), field=field, hint=hint)


# libyaml's parser (PyYAML's wheels carry it): five times faster than the pure-Python one, which
# a run paid on every file of the catalogue before it started
class _Loader(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader, with every value it cannot construct reported at its line.

    Timestamps stay the text they were written as: no field of a scenario or an inventory is a
    date, and YAML's date constructor raises on `2001-13-45` instead of reporting it."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            # an integer of more than Python's 4300 digits, `!!float x`, `!!bool x`, ...
            problem = f"cannot read this {node.tag.rsplit(':', 1)[-1]} value"
            if "integer string conversion" in str(exc):
                problem = f"an integer of more than {sys.get_int_max_str_digits()} digits"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None


def _as_text(loader: _Loader, node: yaml.Node) -> Any:
    return loader.construct_yaml_str(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _as_text)

_UNION_TAGS: set[str] = set()


def register_union_tags(*tags: str) -> None:
    _UNION_TAGS.update(tags)


def load(path: Path, error_cls: type[InputError], what: str, *, trusted: bool = False) -> Source:
    """`path` parsed, with the line of every value; `trusted`: see runner.fsutil.read_bytes."""
    raw = read_bytes(path, MAX_BYTES, error_cls, what, trusted=trusted)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error_cls(f"not UTF-8 text ({exc.reason})", file=path) from None
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # non-printable characters are refused as it reads
        node = loader.get_single_node()
        if node is None:
            raise error_cls(f"empty {what} file", file=path)
        lines: dict[tuple[Any, ...], int] = {(): node.start_mark.line + 1}
        _walk(node, (), lines, path, error_cls, 0, [0])
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        hint = "fix the YAML syntax (indentation, quotes, colons)"
        if isinstance(exc, yaml.constructor.ConstructorError):
            hint = "quote the value if it is text, or give one the field accepts"
        raise error_cls(f"invalid YAML: {problem}", file=path, line=line, hint=hint) from None
    except yaml.YAMLError as exc:
        raise error_cls(f"invalid YAML: {exc}", file=path) from None
    except RecursionError:
        raise error_cls(f"nested deeper than {MAX_DEPTH} levels", file=path) from None
    finally:
        if loader is not None:
            loader.dispose()
    return Source(path=path, data=data, lines=lines)


def _walk(
    node: yaml.Node,
    path: tuple[Any, ...],
    lines: dict[tuple[Any, ...], int],
    file: Path,
    error_cls: type[InputError],
    depth: int,
    count: list[int],
) -> None:
    count[0] += 1
    if count[0] > MAX_NODES:
        raise error_cls(
            f"more than {MAX_NODES} values (with YAML aliases expanded)",
            file=file,
            line=node.start_mark.line + 1,
            hint="remove the anchors/aliases that multiply the document",
        )
    if depth > MAX_DEPTH:
        raise error_cls(
            f"nested deeper than {MAX_DEPTH} levels", file=file, line=node.start_mark.line + 1
        )
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise error_cls(
                    "mapping keys must be plain values",
                    file=file,
                    line=key_node.start_mark.line + 1,
                )
            key = key_node.value
            if key in seen:
                raise error_cls(
                    f"duplicate key {key!r}",
                    file=file,
                    line=key_node.start_mark.line + 1,
                    field=".".join(str(p) for p in (*path, key)),
                    hint="YAML would silently keep only the last one; remove one",
                )
            seen.add(key)
            lines[(*path, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*path, key), lines, file, error_cls, depth + 1, count)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines, file, error_cls, depth + 1, count)
