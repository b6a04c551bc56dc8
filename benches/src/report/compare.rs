//! mmtests' compare of two runs.

use std::fmt::Write as _;

use super::{Report, Summary, fmt_value, gain};

/// mmtests' compare: every row that two runs share (two kernels, two
/// hosts, before and after a change), experiment by experiment and table
/// by table as run `a` grouped them: median, min and max of `a`, then of
/// `b` with its gain over `a` (positive is better, whatever the metric).
/// Rows only one run has are listed by name.
pub fn compare(a: &[Report], b: &[Report]) -> String {
    const LABEL: usize = 36;
    const STAT: usize = 16;
    const COL: usize = 20;
    let mut out = String::new();
    for ra in a {
        let Some(rb) = b.iter().find(|r| r.experiment == ra.experiment) else {
            let _ = writeln!(out, "== {}: only in A\n", ra.experiment);
            continue;
        };
        let metric = ra.metric;
        let _ = writeln!(out, "== {}: {} (seed {})", ra.experiment, ra.title, ra.seed);
        for (side, r) in [("A", ra), ("B", rb)] {
            let _ = writeln!(
                out,
                "   {side}: {}; scale {}, {} sample(s)",
                r.host.describe(),
                r.config.scale,
                r.config.samples
            );
        }
        if rb.metric != metric {
            let _ = writeln!(
                out,
                "   metrics differ ({metric:?} vs {:?}): not comparable\n",
                rb.metric
            );
            continue;
        }
        for table in &ra.tables {
            let _ = writeln!(out, "\n{}", table.title);
            let _ = writeln!(out, "{:LABEL$}{:STAT$}{:>COL$}{:>COL$}", "", "", "A", "B");
            for &i in &table.rows {
                let row_a = &ra.rows[i];
                let Some(row_b) = rb.row(&row_a.name) else {
                    let _ = writeln!(
                        out,
                        "{:LABEL$}{:STAT$}{:>COL$}{:>COL$}",
                        row_a.name, "", "", "not in B"
                    );
                    continue;
                };
                let (sa, sb) = (
                    Summary::of(&row_a.values(metric)),
                    Summary::of(&row_b.values(metric)),
                );
                type Stat = (&'static str, fn(&Summary) -> f64);
                let stats: [Stat; 3] = [
                    ("median", |s| s.median),
                    ("min", |s| s.min),
                    ("max", |s| s.max),
                ];
                for (k, (name, get)) in stats.into_iter().enumerate() {
                    let label = if k == 0 { row_a.name.as_str() } else { "" };
                    let (va, vb) = (get(&sa), get(&sb));
                    let g = gain(va, vb, metric.higher_is_better());
                    let _ = writeln!(
                        out,
                        "{label:LABEL$}{:STAT$}{:>COL$}{:>COL$}",
                        format!("{} {name}", metric.label()),
                        fmt_value(va),
                        format!("{} ({g:>7.2}%)", fmt_value(vb)),
                    );
                }
            }
        }
        let only_b: Vec<&str> = rb
            .rows
            .iter()
            .filter(|r| ra.row(&r.name).is_none())
            .map(|r| r.name.as_str())
            .collect();
        if !only_b.is_empty() {
            let _ = writeln!(out, "\nonly in B: {}", only_b.join(", "));
        }
        out.push('\n');
    }
    for rb in b
        .iter()
        .filter(|rb| !a.iter().any(|ra| ra.experiment == rb.experiment))
    {
        let _ = writeln!(out, "== {}: only in B\n", rb.experiment);
    }
    out
}
