//! The README's command table says what `repro --help` says: every
//! subcommand has a row, every option of `run` is in its row, and every
//! flag a row names exists.

use clap::CommandFactory;
use mmbatch_benches::cli::Cli;

fn repro_rows() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the workspace README");
    readme
        .lines()
        .filter(|l| l.starts_with("| `cargo xtask repro"))
        .map(|l| l.split(" | ").next().unwrap_or(l).to_owned())
        .collect()
}

fn flags(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_command_table_matches_help() {
    let rows = repro_rows();
    assert!(
        !rows.is_empty(),
        "no `cargo xtask repro` rows in the README"
    );
    let cli = Cli::command();
    let run = cli.find_subcommand("run").expect("a run subcommand");
    let known: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .collect();
    for sub in cli.get_subcommands().map(|s| s.get_name()) {
        if sub == "help" {
            continue;
        }
        let pattern = if sub == "run" {
            "`cargo xtask repro [run]".to_owned()
        } else {
            format!("`cargo xtask repro {sub}")
        };
        assert!(
            rows.iter().any(|r| r.contains(&pattern)),
            "the README has no row for `repro {sub}` ({pattern}); rows: {rows:#?}"
        );
    }
    let run_row = rows
        .iter()
        .find(|r| r.contains("repro [run]"))
        .expect("the run row");
    for flag in &known {
        assert!(
            run_row.contains(flag.as_str()),
            "`repro run` has {flag}, the README's row does not: {run_row}"
        );
    }
    for row in &rows {
        for flag in flags(row) {
            assert!(
                known.contains(&flag),
                "the README names {flag}, which `repro --help` does not know: {row}"
            );
        }
    }
}
