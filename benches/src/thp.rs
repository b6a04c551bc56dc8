//! The host's transparent huge page modes, read one way for every
//! experiment that depends on them: the report's host line, `dirty`'s
//! huge-page row and `timedmunlock`'s base-page rows.

use std::path::Path;

/// Where the kernel shows the modes.
const DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// The THP modes: the top-level `enabled` and each size's own
/// (`hugepages-<size>/enabled`, multi-size THP since Linux 6.8, where
/// `inherit` takes the top-level mode; older kernels have none, and the
/// top level governs the one huge size, the PMD's).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    /// The top-level choice (`always`, `madvise`, `never`); `None` where
    /// the kernel has no THP.
    top: Option<String>,
    /// Each size's own choice, as (`2048kB`, `inherit`), sorted.
    sizes: Vec<(String, String)>,
    /// The PMD size's name (`2048kB`, from `hpage_pmd_size`).
    pmd: Option<String>,
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
        let pmd = std::fs::read_to_string(dir.join("hpage_pmd_size"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|bytes| format!("{}kB", bytes / 1024));
        Self { top, sizes, pmd }
    }

    /// The mode of the size named `size` (`inherit` resolved), or the top
    /// level's where the size has no file of its own.
    fn of(&self, size: Option<&str>) -> &str {
        let top = self.top.as_deref().unwrap_or("never");
        match self.sizes.iter().find(|(s, _)| Some(s.as_str()) == size) {
            Some((_, m)) if m != "inherit" => m,
            _ => top,
        }
    }

    /// Each huge size's mode, `inherit` resolved to the top level's (the
    /// top level alone where no size has a file of its own).
    fn effective(&self) -> Vec<&str> {
        if self.sizes.is_empty() {
            return vec![self.of(None)];
        }
        self.sizes.iter().map(|(s, _)| self.of(Some(s))).collect()
    }

    /// Whether some size is "always": anonymous memory then gets huge
    /// pages without advice, at its first fault (`MAP_POPULATE` included).
    pub(crate) fn always(&self) -> bool {
        self.effective().contains(&"always")
    }

    /// Whether anonymous memory advised `MADV_HUGEPAGE` gets PMD-sized
    /// huge pages (one page table entry, one soft-dirty bit, for 2 MiB
    /// on x86-64): the PMD size is "always" or "madvise".
    pub(crate) fn on_advice(&self) -> bool {
        matches!(self.of(self.pmd.as_deref()), "always" | "madvise")
    }

    /// The top-level choice, with the sizes that override it: `madvise`,
    /// or `madvise (64kB always, 2048kB never)`; `unavailable` without
    /// THP. Sizes that are off, as the kernel leaves all but the PMD
    /// size, are named only if the PMD size is one.
    pub(crate) fn describe(&self) -> String {
        let Some(top) = &self.top else {
            return "unavailable".to_owned();
        };
        let own: Vec<String> = self
            .sizes
            .iter()
            .filter(|(s, m)| {
                m != "inherit" && m != top && (m != "never" || self.pmd.as_ref() == Some(s))
            })
            .map(|(s, m)| format!("{s} {m}"))
            .collect();
        if own.is_empty() {
            top.clone()
        } else {
            format!("{top} ({})", own.join(", "))
        }
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

    /// Modes as an x86-64 kernel shows them (a PMD size of 2048kB).
    fn modes(top: Option<&str>, sizes: &[(&str, &str)]) -> Modes {
        Modes {
            top: top.map(str::to_owned),
            sizes: sizes
                .iter()
                .map(|&(s, m)| (s.to_owned(), m.to_owned()))
                .collect(),
            pmd: Some("2048kB".to_owned()),
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
        assert!(modes(Some("madvise"), &inherit).on_advice());
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
        // The top level "never", the PMD size on advice.
        assert!(modes(Some("never"), &[("2048kB", "madvise")]).on_advice());
        // Only a smaller size on advice: no PMD-sized page.
        assert!(!modes(Some("madvise"), &[("2048kB", "never"), ("64kB", "madvise")]).on_advice());
    }

    #[test]
    fn the_description_names_what_overrides_the_top_level() {
        let inherit = [("2048kB", "inherit"), ("64kB", "never")];
        assert_eq!(modes(Some("madvise"), &inherit).describe(), "madvise");
        assert_eq!(modes(Some("madvise"), &[]).describe(), "madvise");
        assert_eq!(
            modes(Some("madvise"), &[("2048kB", "never"), ("64kB", "always")]).describe(),
            "madvise (2048kB never, 64kB always)"
        );
        assert_eq!(modes(None, &[]).describe(), "unavailable");
    }

    /// A directory of its own under the system's temporary one, removed
    /// when dropped.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_kernels_layout_is_read() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = Scratch(
            std::env::temp_dir().join(format!("mmbatch-thp-{}-{nanos}", std::process::id())),
        );
        let d = &dir.0;
        let size = d.join("hugepages-2048kB");
        std::fs::create_dir_all(&size).unwrap();
        std::fs::write(d.join("enabled"), "always [madvise] never\n").unwrap();
        std::fs::write(d.join("hpage_pmd_size"), "2097152\n").unwrap();
        std::fs::write(size.join("enabled"), "always [inherit] madvise never\n").unwrap();
        // A size with no mode of its own, and a directory that is not a
        // size: both ignored.
        std::fs::create_dir_all(d.join("hugepages-16kB")).unwrap();
        std::fs::create_dir_all(d.join("khugepaged")).unwrap();
        let read = Modes::read_in(d);
        assert_eq!(read, modes(Some("madvise"), &[("2048kB", "inherit")]));
        assert!(read.on_advice());
        drop(dir);
        assert_eq!(
            Modes::read_in(&std::env::temp_dir().join("mmbatch-thp-none")),
            Modes::default(),
            "nothing there"
        );
    }
}
