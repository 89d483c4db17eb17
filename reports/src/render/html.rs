//! One self-contained HTML file: inline CSS, inline SVG, no script, no external resource (no
//! URL at all), so it can be mailed, archived with a run, or opened offline.

use crate::compare::Comparison;
use crate::render::sections::{comparison_tables, headline_tables, report_tables};
use crate::render::svg::{self, Plot, esc};
use crate::render::table::{Align, Table};
use crate::render::{comparison_title, report_title};
use crate::report::Report;

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px}\
table{border-collapse:collapse;font-size:13px;margin:6px 0}\
th,td{padding:3px 8px;border-bottom:1px solid #e2e2e2}\
th{background:#f3f3f3;text-align:left}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}\
p.note,figcaption{color:#555;font-size:12px;max-width:900px}\
figure{margin:12px 0}";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n{body}</body>\n</html>\n",
        t = esc(title)
    )
}

fn table_html(t: &Table) -> String {
    let mut o = format!("<h2>{}</h2>\n", esc(&t.title));
    if let Some(n) = &t.note {
        o.push_str(&format!("<p class=\"note\">{}</p>\n", esc(n)));
    }
    if t.rows.is_empty() {
        o.push_str("<p>(none)</p>\n");
        return o;
    }
    let cls = |a: Align| match a {
        Align::Left => "",
        Align::Right => " class=\"r\"",
    };
    o.push_str("<table>\n<thead><tr>");
    for (h, a) in &t.headers {
        o.push_str(&format!("<th{}>{}</th>", cls(*a), esc(h)));
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for r in &t.rows {
        o.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let a = t.headers.get(i).map(|h| h.1).unwrap_or(Align::Left);
            o.push_str(&format!("<td{}>{}</td>", cls(a), esc(c)));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody>\n</table>\n");
    o
}

fn figure(p: &Plot) -> String {
    format!(
        "<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n",
        p.svg,
        esc(&p.caption)
    )
}

/// The HTML report of `report`: headline tables, the plots, then the detail tables.
pub fn report_html(report: &Report) -> String {
    let tables = report_tables(report);
    // Headline tables, then the plots, then the detail tables.
    let split = headline_tables(report).min(tables.len());
    let mut body = String::new();
    for t in &tables[..split] {
        body.push_str(&table_html(t));
    }
    body.push_str("<h2>Plots</h2>\n");
    body.push_str(&figure(&svg::task_rewards(report)));
    if let Some(c) = &report.comparison {
        body.push_str(&figure(&svg::forest(c)));
    }
    body.push_str(&figure(&svg::cost_accuracy(report)));
    body.push_str(&figure(&svg::durations(&report.durations)));
    for t in &tables[split..] {
        body.push_str(&table_html(t));
    }
    page(&report_title(report), &body)
}

/// The HTML page of a comparison: summary, forest plot, per-category and per-task deltas.
pub fn comparison_html(c: &Comparison) -> String {
    let tables = comparison_tables(c);
    let mut body = String::new();
    if let Some((first, rest)) = tables.split_first() {
        body.push_str(&table_html(first));
        body.push_str(&figure(&svg::forest(c)));
        for t in rest {
            body.push_str(&table_html(t));
        }
    }
    page(&comparison_title(c), &body)
}
