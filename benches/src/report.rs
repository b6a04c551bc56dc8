//! Results of an experiment and their presentations: the mmtests compare
//! table the seeds print, JSON, and a Markdown section with an SVG plot.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

/// The machine a report was measured on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Host {
    /// Online CPUs.
    pub cpus: usize,
    /// NUMA nodes with memory or CPUs (1 where the kernel has no NUMA).
    pub nodes: usize,
    /// `uname -r`.
    pub kernel: String,
    /// `MemTotal` in bytes.
    #[serde(default)]
    pub memory_bytes: u64,
    /// `MemAvailable` in bytes when the report was made.
    #[serde(default)]
    pub available_bytes: u64,
    /// Transparent huge pages: the bracketed choice of
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    #[serde(default)]
    pub thp: String,
    /// Reserved huge pages per size: (`2048kB`, total, free), from
    /// `/sys/kernel/mm/hugepages`.
    #[serde(default)]
    pub hugepages: Vec<(String, u64, u64)>,
    /// How the machine is virtualised when `cargo xtask vm` booted it
    /// (`qemu-tcg`, `qemu-kvm`, from `MMBATCH_VM`); empty on a host.
    #[serde(default)]
    pub guest: String,
}

impl Host {
    /// Reads the host's CPUs, nodes, kernel release, memory, THP mode and
    /// huge page pools.
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let nodes = std::fs::read_dir("/sys/devices/system/node")
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.strip_prefix("node")
                            .is_some_and(|n| n.parse::<u32>().is_ok())
                    })
                    .count()
            })
            .unwrap_or(0)
            .max(1);
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_owned());
        let kernel = read("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".to_owned());
        let meminfo = read("/proc/meminfo").unwrap_or_default();
        let kib = |field: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| {
                    l.strip_prefix(field)?
                        .trim()
                        .strip_suffix("kB")?
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or(0)
                * 1024
        };
        let thp = read("/sys/kernel/mm/transparent_hugepage/enabled")
            .ok()
            .and_then(|s| Some(s.split_once('[')?.1.split_once(']')?.0.to_owned()))
            .unwrap_or_else(|| "unavailable".to_owned());
        let mut hugepages: Vec<(String, u64, u64)> = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter_map(|e| {
                        let size = e
                            .file_name()
                            .to_string_lossy()
                            .strip_prefix("hugepages-")?
                            .to_owned();
                        let n = |f: &str| -> u64 {
                            std::fs::read_to_string(e.path().join(f))
                                .ok()
                                .and_then(|s| s.trim().parse().ok())
                                .unwrap_or(0)
                        };
                        Some((size, n("nr_hugepages"), n("free_hugepages")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        hugepages.sort();
        Self {
            guest: std::env::var("MMBATCH_VM").unwrap_or_default(),
            cpus,
            nodes,
            kernel,
            memory_bytes: kib("MemTotal:"),
            available_bytes: kib("MemAvailable:"),
            thp,
            hugepages,
        }
    }

    /// One line: CPUs, nodes, memory, kernel, THP, huge pages.
    pub fn describe(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let huge = if self.hugepages.is_empty() {
            "none".to_owned()
        } else {
            self.hugepages
                .iter()
                .map(|(size, total, free)| format!("{size}: {total} reserved, {free} free"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let memory = if self.memory_bytes == 0 {
            "memory unknown".to_owned()
        } else {
            format!(
                "{:.1} GiB memory ({:.1} GiB available)",
                gib(self.memory_bytes),
                gib(self.available_bytes)
            )
        };
        format!(
            "{} CPUs, {} NUMA node(s), {memory}, Linux {}, THP {}, huge pages {huge}{}",
            self.cpus,
            self.nodes,
            self.kernel,
            if self.thp.is_empty() {
                "unknown"
            } else {
                &self.thp
            },
            self.guest_note(),
        )
    }

    /// `; a QEMU guest (...)` for a report made in `cargo xtask vm`'s
    /// guest, else empty.
    pub fn guest_note(&self) -> String {
        match self.guest.as_str() {
            "" => String::new(),
            "qemu-tcg" => {
                "; a QEMU guest under TCG (software emulation): timings are not performance"
                    .to_owned()
            }
            g => format!("; a {g} guest"),
        }
    }
}

/// What a row's samples measure, and so how the table shows them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Elapsed seconds per sample; lower is better (the seeds' "Elapsed").
    Seconds,
    /// Million operations per second, from each row's `ops_per_sample`;
    /// higher is better.
    MopsPerSec,
}

impl Metric {
    fn label(self) -> &'static str {
        match self {
            Metric::Seconds => "Elapsed",
            Metric::MopsPerSec => "Mops/s",
        }
    }

    /// The axis title of a plot.
    fn axis(self) -> &'static str {
        match self {
            Metric::Seconds => "Elapsed (s)",
            Metric::MopsPerSec => "Mops/s",
        }
    }

    fn higher_is_better(self) -> bool {
        self == Metric::MopsPerSec
    }
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// `WORKLOAD/VARIANT/...`, as the experiment documents.
    pub name: String,
    /// Elapsed seconds of each sample.
    pub samples_s: Vec<f64>,
    /// Operations done per sample, for throughput metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_sample: Option<f64>,
    /// Counters that explain the time, per sample (mean over samples).
    pub counters: BTreeMap<String, f64>,
}

impl Row {
    /// A time-metric row from its samples and named counters.
    pub fn timed<'a>(
        name: String,
        samples_s: Vec<f64>,
        counters: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Self {
        Self {
            name,
            samples_s,
            ops_per_sample: None,
            counters: counters
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }

    /// The row's samples in `metric`'s unit.
    pub fn values(&self, metric: Metric) -> Vec<f64> {
        match metric {
            Metric::Seconds => self.samples_s.clone(),
            Metric::MopsPerSec => {
                let ops = self.ops_per_sample.unwrap_or(0.0);
                self.samples_s.iter().map(|s| ops / s / 1e6).collect()
            }
        }
    }
}

/// Summary statistics of one row's samples, as mmtests prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Smallest sample.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1).
    pub stddev: f64,
    /// Largest sample.
    pub max: f64,
    /// `max - min`.
    pub range: f64,
    /// Median.
    pub median: f64,
}

impl Summary {
    /// Summarises `xs` (all zero when empty).
    pub fn of(xs: &[f64]) -> Self {
        if xs.is_empty() {
            return Self::default();
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let mut sorted = xs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 0 {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        } else {
            sorted[mid]
        };
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        Self {
            min,
            mean,
            stddev: var.sqrt(),
            max,
            range: max - min,
            median,
        }
    }
}

/// Which statistic of a row a seed comparison reads: the seed's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// Smallest sample (mmtests' "min", the seeds' usual headline).
    Min,
    /// Median sample.
    Median,
}

/// A figure the seed published, as the speedup of its technique over its
/// baseline, and the two rows of ours that measure the same thing.
#[derive(Clone, Copy, Debug)]
pub struct SeedRef {
    /// What it is, in the seed's terms.
    pub what: &'static str,
    /// Our baseline row.
    pub base: &'static str,
    /// Our technique row.
    pub tech: &'static str,
    /// The seed's speedup: baseline time / technique time (or technique
    /// rate / baseline rate), > 1 when the technique wins.
    pub seed: f64,
    /// Which statistic, as the seed reports it.
    pub stat: Stat,
}

/// One seed figure beside ours.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SeedFigure {
    /// What it is, in the seed's terms.
    pub what: String,
    /// The seed's speedup.
    pub seed: f64,
    /// Ours, from this run's rows; `None` when a row did not run.
    pub ours: Option<f64>,
}

/// Our speedup of `tech` over `base` in `metric`, by `stat`.
fn speedup(rows: &[Row], metric: Metric, base: &str, tech: &str, stat: Stat) -> Option<f64> {
    let get = |name: &str| {
        let row = rows
            .iter()
            .find(|r| r.name == name && !r.samples_s.is_empty())?;
        let s = Summary::of(&row.values(metric));
        Some(match stat {
            Stat::Min if metric.higher_is_better() => s.max,
            Stat::Min => s.min,
            Stat::Median => s.median,
        })
    };
    let (b, t) = (get(base)?, get(tech)?);
    let x = if metric.higher_is_better() {
        t / b
    } else {
        b / t
    };
    x.is_finite().then_some(x)
}

/// The seed's figures beside ours, and one sentence: which agree (ours
/// within a quarter of the seed's speedup), which differ and how, then
/// `why`, the experiment's account of the differences.
pub fn versus_seed(
    rows: &[Row],
    metric: Metric,
    refs: &[SeedRef],
    why: &str,
) -> (Vec<SeedFigure>, String) {
    let figures: Vec<SeedFigure> = refs
        .iter()
        .map(|r| SeedFigure {
            what: r.what.to_owned(),
            seed: r.seed,
            ours: speedup(rows, metric, r.base, r.tech, r.stat),
        })
        .collect();
    if figures.is_empty() {
        return (figures, why.to_owned());
    }
    let (mut agree, mut differ) = (Vec::new(), Vec::new());
    for f in &figures {
        match f.ours {
            Some(o) if (o / f.seed - 1.0).abs() <= 0.25 => agree.push(f.what.clone()),
            Some(o) => differ.push(format!(
                "{} ({:.2}x here vs {:.2}x, {})",
                f.what,
                o,
                f.seed,
                if o > f.seed { "larger" } else { "smaller" }
            )),
            None => differ.push(format!("{} (not measured in this run)", f.what)),
        }
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join("; ")
        }
    };
    let sentence = format!(
        "Agrees with the seed (within 25%): {}. Differs: {}. {why}",
        list(&agree),
        list(&differ)
    );
    (figures, sentence)
}

/// A group of rows compared side by side; the first is the baseline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    /// What the group holds, e.g. `counter, 2 threads`.
    pub title: String,
    /// Indices into the report's rows; the first is the baseline.
    pub rows: Vec<usize>,
    /// Column headings (default: the row names).
    pub columns: Vec<String>,
}

/// The result of one experiment run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The experiment id (`batch`, `munlock`, ...).
    pub experiment: String,
    /// One-line title.
    pub title: String,
    /// The seed it reproduces.
    pub seed: String,
    /// Where it ran.
    pub host: Host,
    /// The options it ran with.
    pub config: crate::Config,
    /// The unit of the tables.
    pub metric: Metric,
    /// Every measured configuration.
    pub rows: Vec<Row>,
    /// How rows are grouped for comparison.
    pub tables: Vec<Table>,
    /// Findings: targets met or missed, with the figures.
    pub notes: Vec<String>,
    /// The seed's published figures beside ours.
    #[serde(default)]
    pub versus_seed: Vec<SeedFigure>,
    /// What agrees with the seed, what differs, and why.
    #[serde(default)]
    pub versus_seed_summary: String,
}

impl Report {
    /// The row named `name`.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Median of `name` in the report's metric.
    pub fn median(&self, name: &str) -> Option<f64> {
        self.row(name)
            .map(|r| Summary::of(&r.values(self.metric)).median)
    }

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
            "   host: {} CPUs, {} NUMA node(s), Linux {}{}; scale {}, {} sample(s){}",
            self.host.cpus,
            self.host.nodes,
            self.host.kernel,
            self.host.guest_note(),
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

    fn table_text(&self, table: &Table) -> String {
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
    fn svg(&self, table: &Table, sums: &[Summary]) -> String {
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

/// mmtests' gain: positive is better.
fn gain(base: f64, v: f64, higher_is_better: bool) -> f64 {
    if base == 0.0 {
        return 0.0;
    }
    if higher_is_better {
        (v - base) / base * 100.0
    } else {
        (base - v) / base * 100.0
    }
}

fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

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

fn fmt_count(v: f64) -> String {
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_hand_computed() {
        let s = Summary::of(&[3.38, 3.39, 3.41, 3.40]);
        assert!((s.mean - 3.395).abs() < 1e-9);
        assert!((s.median - 3.395).abs() < 1e-9);
        assert!((s.range - 0.03).abs() < 1e-9);
        assert!((s.stddev - 0.012_909_944).abs() < 1e-6);
    }

    fn report(experiment: &str, rows: &[(&str, &[f64])]) -> Report {
        Report {
            experiment: experiment.to_owned(),
            title: "t".to_owned(),
            seed: "s".to_owned(),
            host: Host::default(),
            config: crate::Config::default(),
            metric: Metric::Seconds,
            rows: rows
                .iter()
                .map(|(n, xs)| Row::timed((*n).to_owned(), xs.to_vec(), []))
                .collect(),
            tables: vec![Table {
                title: "table".to_owned(),
                rows: (0..rows.len()).collect(),
                columns: rows.iter().map(|(n, _)| (*n).to_owned()).collect(),
            }],
            notes: Vec::new(),
            versus_seed: Vec::new(),
            versus_seed_summary: String::new(),
        }
    }

    #[test]
    fn compare_pairs_rows_by_name_and_signs_gains() {
        let a = report(
            "x",
            &[
                ("base", &[2.0, 2.0]),
                ("fast", &[1.0, 1.0]),
                ("gone", &[1.0]),
            ],
        );
        let b = report(
            "x",
            &[
                ("base", &[1.0, 1.0]),
                ("fast", &[1.0, 1.0]),
                ("new", &[1.0]),
            ],
        );
        let text = compare(std::slice::from_ref(&a), &[b]);
        // base: 2 s -> 1 s is a 50% gain for a time metric.
        let base = text.lines().find(|l| l.starts_with("base")).unwrap();
        assert!(base.contains("50.00%"), "{text}");
        assert!(text.contains("gone") && text.contains("not in B"), "{text}");
        assert!(text.contains("only in B: new"), "{text}");
        assert!(compare(&[a], &[]).contains("x: only in A"));
    }

    #[test]
    fn versus_seed_reads_the_seeds_statistic() {
        let r = report(
            "x",
            &[("step-0", &[3.0, 4.0, 5.0]), ("step-7", &[1.5, 3.0, 3.5])],
        );
        let refs = [
            SeedRef {
                what: "min",
                base: "step-0",
                tech: "step-7",
                seed: 2.0,
                stat: Stat::Min,
            },
            SeedRef {
                what: "median",
                base: "step-0",
                tech: "step-7",
                seed: 2.0,
                stat: Stat::Median,
            },
            SeedRef {
                what: "absent",
                base: "step-0",
                tech: "step-9",
                seed: 1.0,
                stat: Stat::Min,
            },
        ];
        let (figs, sentence) = versus_seed(&r.rows, Metric::Seconds, &refs, "Why.");
        assert_eq!(figs[0].ours, Some(2.0)); // 3.0 / 1.5
        assert!((figs[1].ours.unwrap() - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(figs[2].ours, None);
        assert!(
            sentence.starts_with("Agrees with the seed (within 25%): min."),
            "{sentence}"
        );
        assert!(
            sentence.contains("median (1.33x here vs 2.00x, smaller)"),
            "{sentence}"
        );
        assert!(
            sentence.contains("absent (not measured in this run)") && sentence.ends_with("Why.")
        );
    }

    #[test]
    fn gain_follows_mmtests_sign() {
        // Seed 000 step 7: 3.38 s -> 1.91 s is a 43.49% gain.
        assert!((gain(3.38, 1.91, false) - 43.49).abs() < 0.01);
        assert!((gain(10.0, 25.0, true) - 150.0).abs() < 1e-9);
    }
}
