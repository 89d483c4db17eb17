//! Output formats of reports and comparisons. Every format starts from the same tables
//! ([`sections`]), so they agree to the digit.

pub mod html;
pub mod sections;
pub mod svg;
pub mod table;

use crate::compare::Comparison;
use crate::report::Report;

/// A text output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// Plain text tables for a terminal.
    Term,
    /// Markdown tables under headings.
    Markdown,
    /// One self-contained HTML page with plots.
    Html,
}

/// The title of `report` in every format.
fn report_title(report: &Report) -> String {
    let runs: Vec<&str> = report.runs.iter().map(|r| r.run_id.as_str()).collect();
    let scored = report
        .reward_key
        .as_ref()
        .map(|k| format!(" (scoring reward key {k})"))
        .unwrap_or_default();
    format!("GEODE report: {}{scored}", runs.join(", "))
}

/// The title of comparison `c` in every format.
fn comparison_title(c: &Comparison) -> String {
    format!("GEODE comparison: {} vs {}", c.candidate, c.baseline)
}

/// `report` in `format`.
pub fn report(report: &Report, format: TextFormat) -> String {
    match format {
        TextFormat::Term => format!(
            "{}\n\n{}",
            report_title(report),
            table::term(&sections::report_tables(report))
        ),
        TextFormat::Markdown => format!(
            "# {}\n\n{}",
            report_title(report),
            table::markdown(&sections::report_tables(report))
        ),
        TextFormat::Html => html::report_html(report),
    }
}

/// Comparison `c` in `format`.
pub fn comparison(c: &Comparison, format: TextFormat) -> String {
    let title = comparison_title(c);
    match format {
        TextFormat::Term => format!(
            "{title}\n\n{}",
            table::term(&sections::comparison_tables(c))
        ),
        TextFormat::Markdown => format!(
            "# {title}\n\n{}",
            table::markdown(&sections::comparison_tables(c))
        ),
        TextFormat::Html => html::comparison_html(c),
    }
}
