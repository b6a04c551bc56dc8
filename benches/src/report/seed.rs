//! The seeds' published figures beside ours: "Against the seed".

use serde::{Deserialize, Serialize};

use super::{Metric, Row, Summary};

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
