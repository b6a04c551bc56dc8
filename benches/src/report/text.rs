//! The mmtests compare table the seeds print, as text.

use std::fmt::Write as _;

use super::{Metric, Report, Row, Summary, Table, fmt_count, fmt_value, gain};

impl Report {
    /// The tables in the seeds' mmtests compare format.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "== {}: {} (seed {})",
            self.experiment, self.title, self.seed
        );
        let _ = writeln!(
            out,
            "   host: {} CPUs, {} NUMA node(s), Linux {}{}{}; scale {}, {} sample(s){}",
            self.host.cpus,
            self.host.nodes,
            self.host.kernel,
            self.host.guest_note(),
            self.host.round_trip_note(),
            self.config.scale,
            self.config.samples,
            match self.metric {
                Metric::MopsPerSec => "; higher is better",
                Metric::Seconds => "; lower is better",
            }
        );
        for table in &self.tables {
            out.push('\n');
            out.push_str(&self.table_text(table));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "   {note}");
            }
        }
        if !self.versus_seed.is_empty() {
            let _ = writeln!(out, "\n   seed vs ours (speedup of the technique):");
            for f in &self.versus_seed {
                let ours = f.ours.map_or("-".to_owned(), |o| format!("{o:.2}x"));
                let _ = writeln!(
                    out,
                    "   {:<56} seed {:>6.2}x  ours {ours:>7}",
                    f.what, f.seed
                );
            }
        }
        if !self.versus_seed_summary.is_empty() {
            let _ = writeln!(out, "   {}", self.versus_seed_summary);
        }
        out
    }

    pub(super) fn table_text(&self, table: &Table) -> String {
        const LABEL: usize = 22;
        const COL: usize = 22;
        let metric = self.metric;
        let rows: Vec<&Row> = table.rows.iter().map(|&i| &self.rows[i]).collect();
        let sums: Vec<Summary> = rows
            .iter()
            .map(|r| Summary::of(&r.values(metric)))
            .collect();
        // Wide enough for the longest heading, with a space before it.
        let col = table
            .columns
            .iter()
            .map(|c| c.len() + 1)
            .max()
            .unwrap_or(0)
            .max(COL);
        let mut out = String::new();
        let _ = writeln!(out, "{}", table.title);
        let _ = write!(out, "{:LABEL$}", "");
        for c in &table.columns {
            let _ = write!(out, "{c:>col$}");
        }
        out.push('\n');
        type Stat = (&'static str, fn(&Summary) -> f64, bool);
        let stats: [Stat; 5] = [
            ("min", |s| s.min, true),
            ("mean", |s| s.mean, true),
            ("stddev", |s| s.stddev, false),
            ("max", |s| s.max, true),
            ("range", |s| s.range, false),
        ];
        for (name, get, directional) in stats {
            let _ = write!(out, "{:LABEL$}", format!("{} {name}", metric.label()));
            let base = get(&sums[0]);
            for (s, row) in sums.iter().zip(&rows) {
                if row.samples_s.is_empty() {
                    // The host refused this configuration (see the notes).
                    let _ = write!(out, "{:>col$}", "refused");
                    continue;
                }
                let v = get(s);
                let g = gain(base, v, directional && metric.higher_is_better());
                let _ = write!(out, "{:>col$}", format!("{} ({:>7.2}%)", fmt_value(v), g));
            }
            out.push('\n');
        }
        let mut keys: Vec<&String> = rows.iter().flat_map(|r| r.counters.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let _ = write!(out, "{key:LABEL$}");
            for r in &rows {
                let v = r
                    .counters
                    .get(key)
                    .map_or("-".to_owned(), |v| fmt_count(*v));
                let _ = write!(out, "{v:>col$}");
            }
            out.push('\n');
        }
        out
    }
}
