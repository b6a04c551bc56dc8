//! `cargo xtask vm`'s arguments, topology and cpio packing.

use super::*;

fn parse(args: &[&str]) -> Result<Args, String> {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        vm: Args,
    }
    let cli =
        <Cli as clap::Parser>::try_parse_from(std::iter::once("vm").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
    cli.vm.check()?;
    Ok(cli.vm)
}

#[test]
fn topology_splits_cpus_and_memory() {
    let a = parse(&["--nodes", "4", "--cpus", "2"]).unwrap();
    let t = topology(&a);
    assert_eq!(t.len(), 4);
    assert_eq!(t.iter().map(|n| n.1).sum::<usize>(), 2048);
    assert_eq!(topology_env(&t), "0:;1:0;2:;3:1");
    let b = parse(&["--memory-only-node"]).unwrap();
    assert_eq!(topology_env(&topology(&b)), "0:0;1:1;2:");
    assert!(parse(&["--nodes", "16"]).is_err());
    let c = parse(&["ktask:numa", "--", "--nocapture"]).unwrap();
    assert_eq!(
        (c.tests, c.test_args),
        (
            vec!["ktask:numa".to_owned()],
            vec!["--nocapture".to_owned()]
        )
    );
}

#[test]
fn cpio_is_newc_with_a_trailer() {
    let mut c = Cpio::default();
    c.dir("bin");
    c.file("init", b"#!/bin/sh\n", 0o755);
    let out = c.finish();
    assert!(out.starts_with(b"070701"));
    assert_eq!(out.len() % 4, 0);
    assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
}
