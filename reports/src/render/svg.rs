//! Inline SVG plots for the HTML report, written by hand: four small charts do not justify a
//! plotting dependency, and hand-written markup is easy to keep free of external resources.
//!
//! Plots with one row per task show at most [`MAX_ROWS`] rows, spread evenly over the sorted
//! tasks so the shape of the distribution survives; the caption says when rows were left out.

use std::collections::BTreeMap;

use crate::compare::{Comparison, TaskDelta};
use crate::render::table::clip;
use crate::report::{Histogram, Report, RunScores, RunUsage, TaskStats};

/// Most task rows in one plot.
pub const MAX_ROWS: usize = 60;

/// Most task points in the scatter plot (beyond, the page gets heavy without showing more).
pub const MAX_POINTS: usize = 2000;

const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Colour of the `i`th run.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Escapes text for XML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A linear map from data to pixels.
#[derive(Clone, Copy)]
struct Scale {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl Scale {
    fn new(d0: f64, d1: f64, r0: f64, r1: f64) -> Scale {
        let d1 = if (d1 - d0).abs() < 1e-12 {
            d0 + 1.0
        } else {
            d1
        };
        Scale { d0, d1, r0, r1 }
    }
    fn at(&self, x: f64) -> f64 {
        self.r0 + (x - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }
}

/// About `n` round tick values covering [lo, hi].
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).abs().max(1e-12);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

fn tick_label(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// An SVG document under construction.
struct Svg {
    out: String,
}

impl Svg {
    fn new(w: f64, h: f64, label: &str) -> Svg {
        let mut out = format!(
            "<svg viewBox=\"0 0 {w:.0} {h:.0}\" width=\"{w:.0}\" height=\"{h:.0}\" role=\"img\" \
             aria-label=\"{l}\" font-family=\"sans-serif\" font-size=\"11\">\n<title>{l}</title>\n",
            l = esc(label)
        );
        out.push_str(&format!(
            "<rect x=\"0\" y=\"0\" width=\"{w:.0}\" height=\"{h:.0}\" fill=\"#fff\"/>\n"
        ));
        Svg { out }
    }
    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        self.out.push_str(&format!(
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{stroke}\" stroke-width=\"{width}\"/>\n"
        ));
    }
    fn circle(&mut self, x: f64, y: f64, r: f64, fill: &str, opacity: f64, tip: &str) {
        self.out.push_str(&format!(
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\" fill=\"{fill}\" fill-opacity=\"{opacity}\"><title>{}</title></circle>\n",
            esc(tip)
        ));
    }
    /// A rectangle `(x, y, width, height)` with a hover tip.
    fn rect(&mut self, (x, y, w, h): (f64, f64, f64, f64), fill: &str, opacity: f64, tip: &str) {
        self.out.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\" fill-opacity=\"{opacity}\"><title>{}</title></rect>\n",
            esc(tip)
        ));
    }
    fn text(&mut self, x: f64, y: f64, anchor: &str, s: &str) {
        self.out.push_str(&format!(
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>\n",
            esc(s)
        ));
    }
    fn polygon(&mut self, points: &[(f64, f64)], fill: &str) {
        let p: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        self.out.push_str(&format!(
            "<polygon points=\"{}\" fill=\"{fill}\"/>\n",
            p.join(" ")
        ));
    }
    /// Vertical grid lines with labels under the plot area.
    fn x_axis(&mut self, sx: Scale, top: f64, bottom: f64, values: &[f64], title: &str) {
        for &v in values {
            let x = sx.at(v);
            self.line(x, top, x, bottom, "#e5e5e5", 1.0);
            self.text(x, bottom + 14.0, "middle", &tick_label(v));
        }
        self.line(sx.r0, bottom, sx.r1, bottom, "#888", 1.0);
        self.text((sx.r0 + sx.r1) / 2.0, bottom + 30.0, "middle", title);
    }
    fn legend(&mut self, x: f64, y: f64, runs: &[String]) {
        let mut cx = x;
        for (i, r) in runs.iter().enumerate() {
            self.rect((cx, y - 9.0, 10.0, 10.0), color(i), 1.0, r);
            self.text(cx + 14.0, y, "start", r);
            cx += 24.0 + 7.0 * r.chars().count() as f64;
        }
    }
    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// `n` indices spread evenly over `0..len` (all of them when `len <= n`).
fn spread(len: usize, n: usize) -> Vec<usize> {
    if len <= n {
        return (0..len).collect();
    }
    let mut v: Vec<usize> = (0..n)
        .map(|i| ((i as f64) * (len - 1) as f64 / (n - 1).max(1) as f64).round() as usize)
        .collect();
    v.dedup();
    v
}

/// A plot and its caption.
pub struct Plot {
    /// The plot as an inline `<svg>` element.
    pub svg: String,
    /// Text shown under the plot.
    pub caption: String,
}

fn shown(total: usize, rows: usize, what: &str) -> String {
    if rows < total {
        format!(" Showing {rows} of {total} {what}, evenly spread over the sorted order.")
    } else {
        String::new()
    }
}

/// Per-task mean reward with ±1.96 standard-error bars, one colour per run.
pub fn task_rewards(report: &Report) -> Plot {
    let runs: Vec<String> = report.runs.iter().map(|r| r.run_id.clone()).collect();
    // task -> its stats in each run (report order).
    let mut by_task: BTreeMap<&str, Vec<Option<&TaskStats>>> = BTreeMap::new();
    for t in &report.tasks {
        let Some(ri) = runs.iter().position(|r| *r == t.run_id) else {
            continue;
        };
        by_task
            .entry(&t.task_id)
            .or_insert_with(|| vec![None; runs.len()])[ri] = Some(t);
    }
    // Sort by the mean over runs, best first, so the plot reads as a profile.
    let mut rows: Vec<(&str, f64)> = by_task
        .iter()
        .map(|(n, ts)| {
            let ms: Vec<f64> = ts.iter().flatten().filter_map(|t| t.mean_reward).collect();
            (*n, geode_graders::summary::mean(&ms).unwrap_or(-1.0))
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let pick = spread(rows.len(), MAX_ROWS);
    let row_h = 8.0 + 6.0 * runs.len() as f64;
    let (left, right, top) = (230.0, 880.0, 40.0);
    let bottom = top + row_h * pick.len() as f64;
    let mut s = Svg::new(900.0, bottom + 45.0, "Per-task mean reward with error bars");
    s.legend(left, 20.0, &runs);
    let sx = Scale::new(0.0, 1.0, left, right);
    s.x_axis(
        sx,
        top,
        bottom,
        &ticks(0.0, 1.0, 5),
        "mean reward (bars: ±1.96 stderr)",
    );
    for (row, &i) in pick.iter().enumerate() {
        let (name, _) = rows[i];
        let y0 = top + row_h * row as f64;
        s.text(left - 6.0, y0 + row_h / 2.0 + 4.0, "end", &clip(name, 36));
        let stats = by_task.get(name).map(Vec::as_slice).unwrap_or(&[]);
        for (ri, t) in stats.iter().enumerate() {
            let Some(t) = t else { continue };
            let Some(m) = t.mean_reward else { continue };
            let y = y0 + 7.0 + 6.0 * ri as f64;
            if let Some(se) = t.stderr {
                let lo = (m - 1.96 * se).max(0.0);
                let hi = (m + 1.96 * se).min(1.0);
                s.line(sx.at(lo), y, sx.at(hi), y, color(ri), 1.5);
            }
            let tip = format!(
                "{} {}: {:.3} over {} trials",
                t.run_id, t.task_id, m, t.trials
            );
            s.circle(sx.at(m), y, 3.0, color(ri), 1.0, &tip);
        }
    }
    Plot {
        svg: s.finish(),
        caption: format!(
            "Per-task mean reward (infrastructure trials excluded), best first; bars are ±1.96 \
             standard errors of the task mean.{}",
            shown(rows.len(), pick.len(), "tasks")
        ),
    }
}

/// Forest plot of per-task paired deltas, with the overall estimate and its t-interval.
pub fn forest(c: &Comparison) -> Plot {
    let mut rows: Vec<&TaskDelta> = c.tasks.iter().filter(|t| t.delta.is_some()).collect();
    rows.sort_by(|a, b| {
        b.delta
            .unwrap_or(0.0)
            .total_cmp(&a.delta.unwrap_or(0.0))
            .then(a.task_id.cmp(&b.task_id))
    });
    let pick = spread(rows.len(), MAX_ROWS);
    let overall = c.statistics.estimate;
    let overall_ci = c.statistics.t.map(|t| (t.interval.lower, t.interval.upper));
    let mut lo: f64 = -0.1;
    let mut hi: f64 = 0.1;
    for &i in &pick {
        let d = rows[i];
        let (l, h) = d
            .interval
            .unwrap_or((d.delta.unwrap_or(0.0), d.delta.unwrap_or(0.0)));
        lo = lo.min(l);
        hi = hi.max(h);
    }
    let (lo, hi) = (lo.max(-1.0), hi.min(1.0));
    let row_h = 14.0;
    let (left, right, top) = (230.0, 880.0, 30.0);
    let bottom = top + row_h * (pick.len() as f64 + 1.5);
    let mut s = Svg::new(900.0, bottom + 45.0, "Paired-delta forest plot");
    s.text(
        left,
        18.0,
        "start",
        &format!("{} - {}", c.candidate, c.baseline),
    );
    let sx = Scale::new(lo, hi, left, right);
    s.x_axis(
        sx,
        top,
        bottom,
        &ticks(lo, hi, 6),
        "delta (candidate - baseline)",
    );
    s.line(sx.at(0.0), top, sx.at(0.0), bottom, "#444", 1.0);
    for (row, &i) in pick.iter().enumerate() {
        let d = rows[i];
        let y = top + row_h * row as f64 + row_h / 2.0;
        s.text(left - 6.0, y + 4.0, "end", &clip(&d.task_id, 36));
        if let Some((l, h)) = d.interval {
            s.line(sx.at(l.max(lo)), y, sx.at(h.min(hi)), y, color(0), 1.5);
        }
        let v = d.delta.unwrap_or(0.0);
        let tip = format!("{}: delta {:.3} over {} pairs", d.task_id, v, d.pairs);
        s.rect((sx.at(v) - 3.0, y - 3.0, 6.0, 6.0), color(0), 1.0, &tip);
    }
    let y = top + row_h * (pick.len() as f64 + 0.75);
    s.text(left - 6.0, y + 4.0, "end", "overall (task-clustered t)");
    if let Some(m) = overall {
        let (l, h) = overall_ci.unwrap_or((m, m));
        let (xl, xm, xh) = (sx.at(l.max(lo)), sx.at(m), sx.at(h.min(hi)));
        s.polygon(&[(xl, y), (xm, y - 6.0), (xh, y), (xm, y + 6.0)], color(1));
    }
    Plot {
        svg: s.finish(),
        caption: format!(
            "Per-task paired deltas with 95% t-intervals over the task's pairs (none when fewer \
             than two pairs or no spread); the diamond is the overall delta and its 95% \
             task-clustered t-interval.{}",
            shown(rows.len(), pick.len(), "tasks")
        ),
    }
}

/// Cost per trial against accuracy: runs as large points with their 95% interval, tasks small.
pub fn cost_accuracy(report: &Report) -> Plot {
    let per_trial = |cost: f64, n: usize| if n > 0 { cost / n as f64 } else { 0.0 };
    let task_pts: Vec<(usize, f64, f64, &TaskStats)> = report
        .tasks
        .iter()
        .filter_map(|t| {
            let ri = report.runs.iter().position(|r| r.run_id == t.run_id)?;
            Some((ri, per_trial(t.cost_usd, t.all_trials()), t.mean_reward?, t))
        })
        .collect();
    let run_pts: Vec<(usize, &RunScores, &RunUsage)> = report
        .run_scores
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s, report.usage.iter().find(|u| u.run_id == s.run_id)?)))
        .collect();
    let max_x = task_pts
        .iter()
        .map(|p| p.1)
        .chain(run_pts.iter().map(|(_, _, u)| u.cost_per_trial()))
        .fold(0.0f64, f64::max);
    let max_x = if max_x > 0.0 { max_x * 1.05 } else { 1.0 };
    let (left, right, top, bottom) = (70.0, 560.0, 40.0, 360.0);
    let mut s = Svg::new(600.0, 410.0, "Cost per trial against accuracy");
    let runs: Vec<String> = report.runs.iter().map(|r| r.run_id.clone()).collect();
    s.legend(left, 20.0, &runs);
    let sx = Scale::new(0.0, max_x, left, right);
    let sy = Scale::new(0.0, 1.0, bottom, top);
    s.x_axis(
        sx,
        top,
        bottom,
        &ticks(0.0, max_x, 5),
        "cost per trial (USD)",
    );
    for v in ticks(0.0, 1.0, 5) {
        let y = sy.at(v);
        s.line(left, y, right, y, "#e5e5e5", 1.0);
        s.text(left - 6.0, y + 4.0, "end", &tick_label(v));
    }
    s.line(left, top, left, bottom, "#888", 1.0);
    s.text(16.0, (top + bottom) / 2.0, "middle", "reward");
    for i in spread(task_pts.len(), MAX_POINTS) {
        let (ri, x, y, t) = task_pts[i];
        let tip = format!("{} {}: {y:.3}, ${x:.4}/trial", t.run_id, t.task_id);
        s.circle(sx.at(x), sy.at(y), 2.5, color(ri), 0.35, &tip);
    }
    for (ri, sc, u) in run_pts {
        let Some(acc) = sc.scores.accuracy else {
            continue;
        };
        let x = sx.at(u.cost_per_trial());
        if let Some((l, h)) = sc.scores.ci95 {
            s.line(x, sy.at(l.max(0.0)), x, sy.at(h.min(1.0)), color(ri), 2.0);
        }
        let tip = format!("{}: accuracy {acc:.3}, ${:.4} total", sc.run_id, u.cost_usd);
        s.circle(x, sy.at(acc), 6.0, color(ri), 1.0, &tip);
    }
    Plot {
        svg: s.finish(),
        caption: format!(
            "Cost per trial against reward: large points are runs (accuracy, bar = 95% \
             task-clustered interval), small points are tasks (mean reward).{}",
            shown(
                task_pts.len(),
                task_pts.len().min(MAX_POINTS),
                "task points"
            )
        ),
    }
}

/// Histogram of trial durations, bars of the runs side by side within each bin.
pub fn durations(h: &Histogram) -> Plot {
    let (left, right, top, bottom) = (70.0, 860.0, 40.0, 300.0);
    let mut s = Svg::new(900.0, 350.0, "Trial duration histogram");
    let runs: Vec<String> = h.counts.iter().map(|(r, _)| r.clone()).collect();
    s.legend(left, 20.0, &runs);
    let max_c = h
        .counts
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let lo = h.edges.first().copied().unwrap_or(0.0);
    let hi = h.edges.last().copied().unwrap_or(1.0);
    let sx = Scale::new(lo, hi, left, right);
    let sy = Scale::new(0.0, max_c * 1.05, bottom, top);
    for v in ticks(0.0, max_c, 5) {
        let y = sy.at(v);
        s.line(left, y, right, y, "#e5e5e5", 1.0);
        s.text(left - 6.0, y + 4.0, "end", &tick_label(v));
    }
    s.text(16.0, (top + bottom) / 2.0, "middle", "trials");
    let n = runs.len().max(1) as f64;
    for (ri, (run, counts)) in h.counts.iter().enumerate() {
        for (b, &c) in counts.iter().enumerate() {
            if c == 0 || b + 1 >= h.edges.len() {
                continue;
            }
            let (x0, x1) = (sx.at(h.edges[b]), sx.at(h.edges[b + 1]));
            let w = (x1 - x0) / n;
            let y = sy.at(c as f64);
            let tip = format!(
                "{run}: {c} trials in [{:.1}, {:.1}) s",
                h.edges[b],
                h.edges[b + 1]
            );
            let bar = (x0 + w * ri as f64, y, (w - 1.0).max(0.5), bottom - y);
            s.rect(bar, color(ri), 0.85, &tip);
        }
    }
    s.x_axis(sx, top, bottom, &ticks(lo, hi, 8), "trial duration (s)");
    Plot {
        svg: s.finish(),
        caption: "Trial durations (start to finish, every trial), one bar per run in each bin."
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            ticks(0.0, 1.0, 5),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        assert_eq!(tick_label(0.6000000000000001), "0.6");
        assert_eq!(spread(10, 3), vec![0, 5, 9]);
        assert_eq!(esc("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }
}
