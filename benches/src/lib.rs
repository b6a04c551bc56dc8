//! The seed experiments of mmbatch, each one function that both its
//! criterion bench (`cargo bench`) and `cargo xtask repro` call, so there is
//! one implementation of each.
//!
//! [`experiments`] is the registry; [`Experiment::run`] measures at a
//! [`Config`]'s scale and returns a [`Report`], which prints as the seeds'
//! mmtests compare tables ([`Report::to_text`]), serialises to JSON, and
//! renders as Markdown with SVG plots ([`Report::to_markdown`]).

pub mod batch;
mod report;

use serde::Serialize;

pub use report::{Host, Metric, Report, Row, Summary, Table};

/// How big and how long to run.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Work per sample relative to the default, which fits a 2-core,
    /// 24 GiB machine in minutes (1.0). The CI smoke run uses 0.001.
    pub scale: f64,
    /// Largest thread count to measure (default: 2 × CPUs).
    pub threads: usize,
    /// Samples per row.
    pub samples: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            scale: 1.0,
            threads: 2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            samples: 5,
        }
    }
}

/// Where an experiment reports what it is doing.
pub trait Progress {
    /// Row `done + 1` of `total`, named `what`, is starting.
    fn row(&mut self, done: usize, total: usize, what: &str);
}

/// Progress that goes nowhere (criterion, tests).
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn row(&mut self, _: usize, _: usize, _: &str) {}
}

/// One experiment of the registry.
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    /// Its id, as `--only` takes it.
    pub id: &'static str,
    /// The seed it reproduces.
    pub seed: &'static str,
    /// One line.
    pub title: &'static str,
    /// Measures it.
    pub run: fn(&Config, &mut dyn Progress) -> Report,
}

/// Every experiment, in seed order.
pub fn experiments() -> &'static [Experiment] {
    &[batch::EXPERIMENT]
}

/// The experiment with id `id`.
pub fn experiment(id: &str) -> Option<&'static Experiment> {
    experiments().iter().find(|e| e.id == id)
}
