"""The report's page templates (jinja2): ``template.html`` (a report) and ``publish_index.html`` (a
site's index), both extending ``page.html``, the frame every page shares."""

from __future__ import annotations


def page_template(name: str):
    """A page template of this package (``template.html``, ``publish_index.html``; both extend
    ``page.html``), with autoescape on: every value is escaped, nothing is marked safe."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("hpcbench.report", "."), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(name)
