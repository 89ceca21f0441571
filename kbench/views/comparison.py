"""The comparison of a set of runs, as ``kbench compare`` prints it and
:func:`kbench.api.compare` returns it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from kbench.results.result import RunResult
from kbench.views.tables import Table, esc, markdown_text, not_ok_lines, study_tables


@dataclass(frozen=True)
class Comparison:
    """The study tables and the tables beside them (:func:`section_tables`), as text,
    Markdown or HTML.

    >>> comparison = kbench.compare("results")
    >>> print(comparison.text())            # as the terminal shows it
    >>> comparison.tables[0].rows           # the cells, as text
    """

    results: Tuple[RunResult, ...]
    baseline: Optional[str]
    study: Tuple[Table, ...]
    sections: Tuple[Table, ...]

    @classmethod
    def of(cls, results: Sequence[RunResult], baseline: Optional[str] = None) -> Comparison:
        study = tuple(study_tables(results, baseline))
        return cls(tuple(results), baseline, study, tuple(section_tables(results)))

    @property
    def tables(self) -> List[Table]:
        return [*self.study, *self.sections]

    def text(self) -> str:
        return "\n\n".join(t.text() for t in self.study) + "".join(
            "\n\n" + t.text() for t in self.sections
        )

    def markdown(self, title: str = "kbench comparison") -> str:
        failed = [r for r in self.results if not r.ok]
        lines = [f"# {markdown_text(title)}", ""]
        lines += [f"{len(self.results)} runs, {len(failed)} without a result.", ""]
        lines += [t.markdown() + "\n" for t in self.study]
        if failed:
            rows = [[r.run_id, r.status, (r.reason or "").replace("|", "/")] for r in failed]
            headers = ["run", "status", "reason"]
            lines.append(Table("Runs without a result", headers, rows, []).markdown())
        text = "\n".join(lines).rstrip() + "\n"
        return text + "".join("\n" + t.markdown() + "\n" for t in self.sections)

    def __repr__(self) -> str:
        return self.text() or f"<kbench.Comparison: nothing to compare in {len(self.results)} runs>"

    def _repr_html_(self) -> str:
        if not self.tables:
            return f"<p>Nothing to compare in {len(self.results)} runs.</p>"
        lines = [f"<li>{esc(line.strip())}</li>" for line in not_ok_lines(self.results)]
        failed = f"<p>Runs without a result:</p><ul>{''.join(lines)}</ul>" if lines else ""
        return "".join(t.html() for t in self.tables) + failed


def section_tables(results: Sequence[RunResult]) -> List[Table]:
    """Operators, the data-parallel breakdown, the per-operator profiles of model runs."""
    from kbench.views.distributed import breakdown_tables
    from kbench.views.ops import ops_tables, profile_tables

    return ops_tables(results) + breakdown_tables(results) + profile_tables(results)
