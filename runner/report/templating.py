"""The one Jinja2 environment of the HTML reports: autoescaped (every value from a lab or a log
is text, never markup), strict about undefined names."""

from __future__ import annotations

import jinja2

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("runner", "report/templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
