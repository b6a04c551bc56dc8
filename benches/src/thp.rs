//! The host's transparent huge page modes, read one way for every
//! experiment that depends on them: the report's host line, `dirty`'s
//! huge-page row and `timedmunlock`'s base-page rows.

use std::path::Path;

/// Where the kernel shows the modes.
const DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// The THP modes: the top-level `enabled` and each size's own
/// (`hugepages-<size>/enabled`, multi-size THP since Linux 6.8, where
/// `inherit` takes the top-level mode; older kernels have none, and the
/// top level governs the one huge size).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    /// The top-level choice (`always`, `madvise`, `never`); `None` where
    /// the kernel has no THP.
    pub(crate) top: Option<String>,
    /// Each size's own choice, as (`2048kB`, `inherit`), sorted.
    pub(crate) sizes: Vec<(String, String)>,
}

impl Modes {
    /// The host's modes.
    pub(crate) fn read() -> Self {
        Self::read_in(Path::new(DIR))
    }

    /// The modes shown in `dir` (the kernel's layout).
    fn read_in(dir: &Path) -> Self {
        let top = chosen_in(&dir.join("enabled"));
        let mut sizes: Vec<(String, String)> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| {
                        let name = e.file_name();
                        let size = name
                            .to_string_lossy()
                            .strip_prefix("hugepages-")?
                            .to_owned();
                        Some((size, chosen_in(&e.path().join("enabled"))?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        sizes.sort();
        Self { top, sizes }
    }

    /// Each huge size's mode, `inherit` resolved to the top level's (the
    /// top level alone where no size has a file of its own).
    fn effective(&self) -> Vec<&str> {
        let top = self.top.as_deref().unwrap_or("never");
        if self.sizes.is_empty() {
            return vec![top];
        }
        self.sizes
            .iter()
            .map(|(_, m)| if m == "inherit" { top } else { m.as_str() })
            .collect()
    }

    /// Whether some size is "always": anonymous memory then gets huge
    /// pages without advice, at its first fault (`MAP_POPULATE` included).
    pub(crate) fn always(&self) -> bool {
        self.effective().contains(&"always")
    }

    /// Whether anonymous memory advised `MADV_HUGEPAGE` can get huge
    /// pages: some size is "always" or "madvise".
    pub(crate) fn on_advice(&self) -> bool {
        self.effective()
            .iter()
            .any(|&m| m == "always" || m == "madvise")
    }
}

/// The choice a mode file's text shows: its bracketed word
/// (`always [madvise] never` -> `madvise`).
fn chosen(text: &str) -> Option<&str> {
    Some(text.split_once('[')?.1.split_once(']')?.0)
}

/// [`chosen`] of the file at `path`, if readable.
fn chosen_in(path: &Path) -> Option<String> {
    chosen(&std::fs::read_to_string(path).ok()?).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(top: Option<&str>, sizes: &[(&str, &str)]) -> Modes {
        Modes {
            top: top.map(str::to_owned),
            sizes: sizes
                .iter()
                .map(|&(s, m)| (s.to_owned(), m.to_owned()))
                .collect(),
        }
    }

    #[test]
    fn the_bracketed_word_is_the_choice() {
        assert_eq!(chosen("always [madvise] never\n"), Some("madvise"));
        assert_eq!(chosen("always inherit madvise [never]\n"), Some("never"));
        assert_eq!(chosen("always madvise never"), None);
    }

    #[test]
    fn without_sizes_the_top_level_governs() {
        assert!(modes(Some("always"), &[]).always());
        assert!(!modes(Some("madvise"), &[]).always());
        assert!(modes(Some("madvise"), &[]).on_advice());
        assert!(!modes(Some("never"), &[]).on_advice());
        assert!(!modes(None, &[]).on_advice());
    }

    #[test]
    fn a_size_of_its_own_overrides_the_top_level() {
        // The kernel's defaults under multi-size THP: the PMD size
        // inherits, the others are off.
        let inherit = [("2048kB", "inherit"), ("64kB", "never")];
        assert!(modes(Some("always"), &inherit).always());
        assert!(!modes(Some("madvise"), &inherit).always());
        // One size "always" where the top level is "madvise".
        assert!(
            modes(
                Some("madvise"),
                &[("2048kB", "inherit"), ("64kB", "always")]
            )
            .always()
        );
        // The top level "always", but every size off: no huge page.
        let off = [("2048kB", "never"), ("64kB", "never")];
        assert!(!modes(Some("always"), &off).always());
        assert!(!modes(Some("always"), &off).on_advice());
        // The top level "never", one size on advice.
        assert!(modes(Some("never"), &[("2048kB", "madvise")]).on_advice());
    }

    #[test]
    fn the_kernels_layout_is_read() {
        let dir = std::env::temp_dir().join(format!("mmbatch-thp-{}", std::process::id()));
        let size = dir.join("hugepages-2048kB");
        std::fs::create_dir_all(&size).unwrap();
        std::fs::write(dir.join("enabled"), "always [madvise] never\n").unwrap();
        std::fs::write(size.join("enabled"), "always [inherit] madvise never\n").unwrap();
        // Not a size: ignored.
        std::fs::create_dir_all(dir.join("khugepaged")).unwrap();
        let read = Modes::read_in(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read, modes(Some("madvise"), &[("2048kB", "inherit")]));
        assert_eq!(Modes::read_in(&dir), Modes::default(), "nothing there");
    }
}
