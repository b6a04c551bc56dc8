//! Results of an experiment and their presentations: the data model here
//! (rows, tables, reports, summaries); the host in [`host`], the seed
//! comparison in [`seed`], the mmtests text table in [`text`], Markdown
//! and SVG in [`markdown`], and `repro compare` in [`compare()`].

mod compare;
mod host;
mod markdown;
pub mod round_trip;
mod seed;
mod text;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use compare::compare;
pub use host::Host;
pub use seed::{SeedFigure, SeedRef, Stat, versus_seed};

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

    /// The median of `a`'s samples over `b`'s taken with the same index,
    /// in the report's metric: for rows whose samples were taken in turn
    /// (sample 1 of each, then sample 2 of each, ...), each pair saw the
    /// same moment of a noisy host, which a ratio of the two medians does
    /// not ensure. `None` unless both rows have the same number of
    /// samples.
    pub fn paired_ratio(&self, a: &str, b: &str) -> Option<f64> {
        let (a, b) = (
            self.row(a)?.values(self.metric),
            self.row(b)?.values(self.metric),
        );
        if a.len() != b.len() || a.is_empty() {
            return None;
        }
        if b.iter().any(|&y| y <= 0.0 || y.is_nan()) {
            return None;
        }
        let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
        Some(Summary::of(&ratios).median)
    }
}

/// mmtests' gain: positive is better.
pub(crate) fn gain(base: f64, v: f64, higher_is_better: bool) -> f64 {
    if base == 0.0 {
        return 0.0;
    }
    if higher_is_better {
        (v - base) / base * 100.0
    } else {
        (base - v) / base * 100.0
    }
}

pub(crate) fn fmt_value(v: f64) -> String {
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

pub(crate) fn fmt_count(v: f64) -> String {
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
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

    #[test]
    fn paired_ratios_follow_the_turns() {
        // Seconds per sample (the ratio is in the rows' metric, here
        // seconds: `a` takes twice `b`'s time in every turn, though the
        // host slowed both 4x in the last two turns).
        let r = report(
            "x",
            &[
                ("a", &[2.0, 2.0, 2.0, 8.0, 8.0]),
                ("b", &[1.0, 1.0, 1.0, 4.0, 4.0]),
            ],
        );
        assert_eq!(r.paired_ratio("a", "b"), Some(2.0));
        assert_eq!(r.paired_ratio("b", "a"), Some(0.5));
        let r = report("x", &[("a", &[1.0, 2.0]), ("b", &[1.0])]);
        assert_eq!(r.paired_ratio("a", "b"), None, "unequal sample counts");
        assert_eq!(r.paired_ratio("a", "c"), None);
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
