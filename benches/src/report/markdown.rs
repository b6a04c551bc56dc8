//! A report as a Markdown section with an SVG plot per table.

use std::fmt::Write as _;

use super::{Report, Row, Summary, Table, fmt_count, fmt_value, gain};

impl Report {
    /// A Markdown section: the tables as median / min–max / gain, plus one
    /// SVG bar chart per table written into `dir` (file names returned).
    pub fn to_markdown(&self, dir: &std::path::Path) -> std::io::Result<String> {
        let mut md = String::new();
        let _ = writeln!(md, "## `{}` — {}\n", self.experiment, self.title);
        let _ = writeln!(
            md,
            "Seed {}. Host: {}. Scale {}, {} sample(s) per row. {} ({}).\n",
            self.seed,
            self.host.describe(),
            self.config.scale,
            self.config.samples,
            self.metric.label(),
            if self.metric.higher_is_better() {
                "higher is better"
            } else {
                "lower is better"
            },
        );
        for (i, table) in self.tables.iter().enumerate() {
            let rows: Vec<&Row> = table.rows.iter().map(|&i| &self.rows[i]).collect();
            let sums: Vec<Summary> = rows
                .iter()
                .map(|r| Summary::of(&r.values(self.metric)))
                .collect();
            let _ = writeln!(md, "### {}\n", table.title);
            let _ = writeln!(
                md,
                "| row | median | min – max | gain (median) | counters |"
            );
            let _ = writeln!(md, "|---|---:|---:|---:|---|");
            for ((row, s), col) in rows.iter().zip(&sums).zip(&table.columns) {
                if row.samples_s.is_empty() {
                    let _ = writeln!(md, "| {col} | refused | | | see notes |");
                    continue;
                }
                let counters: Vec<String> = row
                    .counters
                    .iter()
                    .map(|(k, v)| format!("{k} {}", fmt_count(*v)))
                    .collect();
                let _ = writeln!(
                    md,
                    "| {col} | {} | {} – {} | {:.2}% | {} |",
                    fmt_value(s.median),
                    fmt_value(s.min),
                    fmt_value(s.max),
                    gain(sums[0].median, s.median, self.metric.higher_is_better()),
                    counters.join(", ")
                );
            }
            let file = format!("{}-{}.svg", self.experiment, i + 1);
            std::fs::write(dir.join(&file), self.svg(table, &sums))?;
            let _ = writeln!(md, "\n![{}]({file})\n", table.title);
        }
        for note in &self.notes {
            let _ = writeln!(md, "- {note}");
        }
        md.push('\n');
        if !self.versus_seed_summary.is_empty() {
            let _ = writeln!(md, "**Against the seed.** {}\n", self.versus_seed_summary);
        }
        if !self.versus_seed.is_empty() {
            let _ = writeln!(md, "| seed figure | seed speedup | ours | ours / seed |");
            let _ = writeln!(md, "|---|---:|---:|---:|");
            for f in &self.versus_seed {
                let (ours, ratio) = f.ours.map_or(("-".to_owned(), "-".to_owned()), |o| {
                    (format!("{o:.2}x"), format!("{:.2}", o / f.seed))
                });
                let _ = writeln!(md, "| {} | {:.2}x | {ours} | {ratio} |", f.what, f.seed);
            }
            md.push('\n');
        }
        Ok(md)
    }

    /// A bar chart of the table's medians with min–max whiskers.
    pub(super) fn svg(&self, table: &Table, sums: &[Summary]) -> String {
        let (w, h, left, bottom, top) = (720.0, 360.0, 70.0, 90.0, 40.0);
        let plot_h = h - bottom - top;
        let ymax = sums
            .iter()
            .map(|s| s.max)
            .fold(0.0_f64, f64::max)
            .max(1e-12)
            * 1.1;
        let n = sums.len().max(1) as f64;
        let slot = (w - left - 20.0) / n;
        let y = |v: f64| top + plot_h * (1.0 - v / ymax);
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{} — {}</text>"#,
            w / 2.0,
            xml(&self.experiment),
            xml(&table.title)
        );
        for k in 0..=4 {
            let v = ymax * k as f64 / 4.0;
            let yy = y(v);
            let _ = writeln!(
                svg,
                r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                w - 20.0,
                left - 6.0,
                yy + 4.0,
                fmt_value(v)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">{}</text>"#,
            top + plot_h / 2.0,
            top + plot_h / 2.0,
            self.metric.axis()
        );
        for (i, (s, col)) in sums.iter().zip(&table.columns).enumerate() {
            let x = left + slot * i as f64 + slot * 0.15;
            let bw = slot * 0.7;
            let fill = if i == 0 { "#999999" } else { "#3b6ea8" };
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="{fill}"/>"#,
                y(s.median),
                (top + plot_h - y(s.median)).max(0.0)
            );
            let cx = x + bw / 2.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
                y(s.min),
                y(s.max)
            );
            let ly = top + plot_h + 14.0;
            let _ = writeln!(
                svg,
                r#"<text x="{cx:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-35 {cx:.1} {ly:.1})">{}</text>"#,
                xml(col)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
