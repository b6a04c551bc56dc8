//! The ARC paper's traces (`benches/traces/`): where they are and how a
//! line of one becomes requests.

use std::{
    io::{self, BufRead, BufReader},
    path::{Path, PathBuf},
};

/// Where the traces are: `benches/traces` of the source tree.
pub fn traces_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/traces"))
}

/// The keys of the `.lis.zst` trace at `path`, one per page, at most
/// `max_keys` of them: each line `START COUNT IGNORED REQUEST_ID` is the
/// pages `START..START + COUNT`.
pub fn read_trace(path: &Path, max_keys: usize) -> io::Result<Vec<u64>> {
    let file = std::fs::File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let reader = BufReader::new(zstd::Decoder::new(file)?);
    let mut keys = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        let mut fields = line.split_ascii_whitespace();
        let (Some(start), Some(count)) = (fields.next(), fields.next()) else {
            continue; // a blank line
        };
        let parse = |f: &str| {
            f.parse::<u64>().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} line {}: {f:?}: {e}", path.display(), n + 1),
                )
            })
        };
        let (start, count) = (parse(start)?, parse(count)?);
        for page in start..start + count {
            if keys.len() == max_keys {
                return Ok(keys);
            }
            keys.push(page);
        }
    }
    Ok(keys)
}
