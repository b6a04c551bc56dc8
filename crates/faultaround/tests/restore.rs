//! Record and replay (REAP's working-set prefetch) and UFFD_EVENT_REMOVE
//! on the host kernel, small sizes, every page checked against the image.

mod gated;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::Duration,
};

use gated::{Gate, GatedRuns, gate, release};
use mmbatch_faultaround::{Error, PageRead, PageSource, Record, UffdRegion};

const PAGE: usize = 4096;

/// Page i holds bytes derived from i, so misplaced pages show.
fn image(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|b| ((b / PAGE) * 7 + b % 251 + 1) as u8)
        .collect()
}

/// Byte `off` of the region, read through a raw pointer (the tests
/// discard pages under the region, which a `&[u8]` must not see).
fn byte(r: &UffdRegion, off: usize) -> u8 {
    assert!(off < r.len());
    // SAFETY: inside the region, which stays mapped while `r` lives.
    unsafe { std::ptr::read_volatile(r.as_ptr().wrapping_add(off)) }
}

fn page_is(r: &UffdRegion, src: &[u8], p: usize) -> bool {
    (0..PAGE)
        .step_by(97)
        .all(|o| byte(r, p * PAGE + o) == src[p * PAGE + o])
}

fn page_is_zero(r: &UffdRegion, p: usize) -> bool {
    (0..PAGE).step_by(97).all(|o| byte(r, p * PAGE + o) == 0)
}

/// `MADV_DONTNEED` on pages `pages` of the region (a balloon's discard).
fn discard(r: &UffdRegion, pages: std::ops::Range<usize>) {
    // SAFETY: a range of the region; no reference into it is alive (the
    // tests read through raw pointers).
    unsafe {
        rustix::mm::madvise(
            r.as_ptr().wrapping_add(pages.start * PAGE) as *mut _,
            pages.len() * PAGE,
            rustix::mm::Advice::LinuxDontNeed,
        )
    }
    .unwrap();
}

/// Runs `f` on a thread and waits at most 20 s for it: a hang fails the
/// test instead of stalling the suite.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s (hung)"))
}

#[test]
fn record_lists_first_touches_in_order() {
    let _hang = mmbatch_testkit::hang_guard("record_lists_first_touches_in_order");
    let src = image(256);
    let r = UffdRegion::builder(256 * PAGE)
        .record(true)
        .image_id("img")
        .build(src.clone())
        .unwrap();
    for p in [10, 3, 50, 11, 3, 10] {
        assert!(page_is(&r, &src, p));
    }
    let rec = r.record().unwrap();
    assert_eq!(rec.pages(), [10, 3, 50, 11]);
    // The page size it counts in: what a replay checks against a
    // region's before it installs a page.
    assert_eq!(
        (rec.image_len(), rec.image_id(), rec.page_size()),
        ((256 * PAGE) as u64, "img", PAGE)
    );
    // Not recording: no record.
    let plain = UffdRegion::new(256 * PAGE, 0, src, 1).unwrap();
    assert!(plain.record().is_none());
}

/// A fault on a region read from a file installs its whole window, each
/// neighbour with its own bytes (read page by page into the handler's
/// buffer), in memory or from a file alike; pages already there are
/// left as they are.
#[test]
fn a_window_from_a_file_installs_each_neighbour_with_its_bytes() {
    let _hang =
        mmbatch_testkit::hang_guard("a_window_from_a_file_installs_each_neighbour_with_its_bytes");
    let src = image(64);
    for name in ["vec", "in-memory", "file"] {
        let r = UffdRegion::builder(64 * PAGE)
            .order(3)
            .build(BoxedSource(source_for(name, &src)))
            .unwrap();
        // Page 13 first, then page 10 of the same window: its neighbours
        // around the one already there.
        for p in [13, 10] {
            assert!(page_is(&r, &src, p), "{name}: page {p}");
        }
        assert_eq!(r.stats().faults, 1, "{name}: one fault for the window");
        for p in 8..16 {
            assert!(page_is(&r, &src, p), "{name}: page {p} of the window");
        }
        assert_eq!(r.stats().faults, 1, "{name}");
    }
}

#[test]
fn replay_installs_the_record_and_faults_serve_the_rest() {
    let _hang = mmbatch_testkit::hang_guard("replay_installs_the_record_and_faults_serve_the_rest");
    let src = image(1024);
    let pages: Vec<u64> = (100..200).chain(500..520).chain([7, 9]).collect();
    let rec = Record::new(PAGE, src.len() as u64, "img", pages.clone()).unwrap();
    // In memory (copied straight from the source) and from a file (runs
    // read with one pread each).
    for name in ["vec", "in-memory", "file"] {
        let r = UffdRegion::builder(1024 * PAGE)
            .image_id("img")
            .replay(rec.clone())
            .build(BoxedSource(source_for(name, &src)))
            .unwrap();
        assert!(r.wait_replayed(Duration::from_secs(10)), "{name}");
        let st = r.stats();
        assert_eq!(st.pages_prefetched, pages.len() as u64, "{name}: {st:?}");
        assert_eq!(r.resident_pages(), pages.len(), "{name}");
        assert_eq!(st.faults, 0, "{name}");
        for &p in &pages {
            assert!(page_is(&r, &src, p as usize), "{name}: page {p}");
        }
        assert_eq!(r.stats().faults, 0, "{name}: recorded pages are resident");
        // A page outside the record faults in as before.
        assert!(page_is(&r, &src, 900), "{name}");
        assert_eq!(r.stats().faults, 1, "{name}");
    }
}

/// A source behind a box, so one test can try several.
struct BoxedSource(Box<dyn PageSource>);

impl PageSource for BoxedSource {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.0.read_page(index, buf)
    }
    fn read_pages(&self, index: u64, count: usize, buf: &mut [u8]) -> PageRead {
        self.0.read_pages(index, count, buf)
    }
    fn pages(&self, index: u64, count: usize, page_size: usize) -> Option<&[u8]> {
        self.0.pages(index, count, page_size)
    }
}

fn source_for(name: &str, src: &[u8]) -> Box<dyn PageSource> {
    match name {
        "vec" => Box::new(src.to_vec()),
        "in-memory" => Box::new(mmbatch_faultaround::InMemory(Arc::<[u8]>::from(src))),
        _ => Box::new(tempfile(src)),
    }
}

/// An unlinked temporary file holding `bytes`.
fn tempfile(bytes: &[u8]) -> std::fs::File {
    use std::io::Write;
    let fd = rustix::fs::memfd_create("restore-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let mut f = std::fs::File::from(fd);
    f.write_all(bytes).unwrap();
    f
}

#[test]
fn a_record_saved_and_loaded_replays_the_same_pages() {
    let _hang = mmbatch_testkit::hang_guard("a_record_saved_and_loaded_replays_the_same_pages");
    let src = image(512);
    let r = UffdRegion::builder(512 * PAGE)
        .record(true)
        .image_id("snap")
        .build(src.clone())
        .unwrap();
    for p in (40..80).chain(300..310).rev() {
        assert!(page_is(&r, &src, p));
    }
    let rec = r.record().unwrap();
    drop(r);
    let mut file = Vec::new();
    rec.save(&mut file).unwrap();
    assert!(
        file.len() < 100,
        "a run costs a byte a page: {} bytes",
        file.len()
    );
    let back = Record::load(&file[..]).unwrap();
    assert_eq!(back, rec);
    let again = UffdRegion::builder(512 * PAGE)
        .image_id("snap")
        .replay(back)
        .build(src.clone())
        .unwrap();
    assert!(again.wait_replayed(Duration::from_secs(10)));
    for p in (40..80).chain(300..310) {
        assert!(page_is(&again, &src, p));
    }
    assert_eq!(again.stats().faults, 0);
}

#[test]
fn a_record_of_another_image_or_a_corrupt_one_is_refused() {
    let _hang =
        mmbatch_testkit::hang_guard("a_record_of_another_image_or_a_corrupt_one_is_refused");
    let src = image(64);
    let rec = Record::new(PAGE, (64 * PAGE) as u64, "a", [1, 2, 3]).unwrap();
    let build = |len: usize, id: &str, rec: Record| {
        UffdRegion::builder(len)
            .image_id(id)
            .replay(rec)
            .build(src.clone())
    };
    match build(32 * PAGE, "a", rec.clone()) {
        Err(
            e @ Error::RecordMismatch {
                what: "image length",
                ..
            },
        ) => {
            assert!(e.to_string().contains("another image"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    match build(64 * PAGE, "b", rec.clone()) {
        Err(
            e @ Error::RecordMismatch {
                what: "image id", ..
            },
        ) => {
            assert!(
                e.to_string().contains("\"a\"") && e.to_string().contains("\"b\""),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    let mut bytes = rec.to_bytes();
    let n = bytes.len();
    bytes[n / 2] ^= 0x40;
    match Record::from_bytes(&bytes) {
        Err(e @ Error::RecordCorrupt { .. }) => assert!(e.to_string().contains("checksum"), "{e}"),
        other => panic!("{other:?}"),
    }
    match Record::load(&b"not a record at all"[..]) {
        Err(e @ Error::RecordCorrupt { .. }) => assert!(e.to_string().contains("magic"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// A region of `pages` pages replaying all of them, its replay blocked
/// reading its first run until the gate opens.
fn stuck_replay(pages: usize) -> (Arc<UffdRegion>, Gate) {
    stuck_replay_of(pages, 0..pages as u64)
}

/// A region of `pages` pages replaying `recorded`, its replay threads
/// blocked in their first runs until the gate opens.
fn stuck_replay_of(
    pages: usize,
    recorded: impl IntoIterator<Item = u64>,
) -> (Arc<UffdRegion>, Gate) {
    let open = gate();
    let runs = Arc::new(AtomicUsize::new(0));
    let g = GatedRuns {
        src: image(pages),
        open: open.clone(),
        runs_read: runs.clone(),
    };
    let rec = Record::new(PAGE, (pages * PAGE) as u64, "", recorded).unwrap();
    // A short source timeout: a replay thread that never returns (a
    // broken copy loop) holds the region's drop for that long, not 30 s.
    let r = UffdRegion::builder(pages * PAGE)
        .replay(rec)
        .source_timeout(Duration::from_secs(2))
        .build(g)
        .unwrap();
    // Both replay threads held in their first runs.
    wait_for("the replay starts", || {
        runs.load(Ordering::SeqCst) >= gated::HELD
    });
    (Arc::new(r), open)
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("{what}: not within 10 s");
}

#[test]
fn a_fault_never_waits_behind_the_replay() {
    let _hang = mmbatch_testkit::hang_guard("a_fault_never_waits_behind_the_replay");
    let (r, open) = stuck_replay(256);
    let src = image(256);
    // The replay is stuck reading its first run; a fault on a recorded
    // page it has not installed is served anyway.
    let r2 = r.clone();
    let src2 = src.clone();
    assert!(bounded("a fault during replay", move || page_is(
        &r2, &src2, 200
    )));
    assert_eq!(r.stats().faults, 1);
    release(&open);
    // `wait_replayed` returns when the replay ends, not at its timeout.
    let r2 = r.clone();
    assert!(bounded("the replay's end", move || r2
        .wait_replayed(Duration::from_secs(3600))));
    for p in 0..256 {
        assert!(page_is(&r, &src, p), "page {p}");
    }
}

/// A thread that runs ahead of the replay reads on through the run it
/// faulted in: the fault installs that recorded run whole (one fault, not
/// one a page), and the replay does not install it again.
#[test]
fn a_fault_ahead_of_the_replay_installs_its_run() {
    let _hang = mmbatch_testkit::hang_guard("a_fault_ahead_of_the_replay_installs_its_run");
    // Runs of 64 (`REPLAY_RUN`): both replay threads are stuck in the
    // first two; page 140 lies in the third, 128..192.
    let (r, open) = stuck_replay(256);
    let src = image(256);
    let (r2, src2) = (r.clone(), src.clone());
    assert!(bounded("a fault ahead of the replay", move || {
        std::iter::once(140)
            .chain(128..192)
            .all(|p| page_is(&r2, &src2, p))
    }));
    assert_eq!(r.stats().faults, 1, "one fault for the run");
    assert_eq!(r.resident_pages(), 64);
    release(&open);
    let r2 = r.clone();
    assert!(bounded("the replay's end", move || r2
        .wait_replayed(Duration::from_secs(3600))));
    let st = r.stats();
    assert_eq!(st.pages_prefetched, 192, "{st:?}");
    assert_eq!(st.pages_copied, 256, "{st:?}");
    assert_eq!(st.already_present, 0, "{st:?}");
    for p in 0..256 {
        assert!(page_is(&r, &src, p), "page {p}");
    }
}

/// With fault-around (order 4), a fault ahead of the replay takes its
/// recorded run and its order's window both: the run 130..132 and the
/// aligned 16 pages 128..144 around page 130, in one fault.
#[test]
fn a_faults_run_comes_with_its_windows_neighbours() {
    let _hang = mmbatch_testkit::hang_guard("a_faults_run_comes_with_its_windows_neighbours");
    let open = gate();
    let runs = Arc::new(AtomicUsize::new(0));
    // Runs 0..64 and 64..128 (the replay threads held in them), 130..132.
    let rec = Record::new(PAGE, (256 * PAGE) as u64, "", (0..128).chain([130, 131])).unwrap();
    let r = Arc::new(
        UffdRegion::builder(256 * PAGE)
            .order(4)
            .replay(rec)
            .source_timeout(Duration::from_secs(2))
            .build(GatedRuns {
                src: image(256),
                open: open.clone(),
                runs_read: runs.clone(),
            })
            .unwrap(),
    );
    wait_for("the replay starts", || {
        runs.load(Ordering::SeqCst) >= gated::HELD
    });
    let src = image(256);
    let (r2, src2) = (r.clone(), src.clone());
    assert!(bounded("a fault ahead of the replay", move || {
        std::iter::once(130)
            .chain(128..144)
            .all(|p| page_is(&r2, &src2, p))
    }));
    assert_eq!(r.stats().faults, 1, "{:?}", r.stats());
    assert_eq!(r.resident_pages(), 16);
    release(&open);
    let r2 = r.clone();
    assert!(bounded("the replay's end", move || r2
        .wait_replayed(Duration::from_secs(3600))));
    assert_eq!(r.stats().pages_prefetched, 128);
}

/// [`GatedRuns`], and besides its held runs, the run read from `held`
/// waits for a second gate: a fault's run, installing while the
/// replay's threads go on.
struct HoldsRun {
    runs: GatedRuns,
    held: u64,
    open: Gate,
    /// Set when the held run is asked for.
    reached: Arc<AtomicBool>,
}

impl PageSource for HoldsRun {
    fn len(&self) -> u64 {
        self.runs.len()
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.runs.read_page(index, buf)
    }
    fn read_pages(&self, index: u64, count: usize, buf: &mut [u8]) -> PageRead {
        if index == self.held {
            self.reached.store(true, Ordering::SeqCst);
            let (lock, cv) = &*self.open;
            let _open = cv.wait_while(lock.lock().unwrap(), |open| !*open).unwrap();
        }
        self.runs.read_pages(index, count, buf)
    }
}

/// Opens its gates when dropped.
struct ReleaseOnDrop(Vec<Gate>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(|g| release(g));
    }
}

/// `wait_replayed` promises the replay done, runs that faults took from
/// it included: it must not return while a fault still installs one,
/// though every replay thread has ended.
#[test]
fn wait_replayed_waits_for_a_run_a_fault_took() {
    let _hang = mmbatch_testkit::hang_guard("wait_replayed_waits_for_a_run_a_fault_took");
    let (open, hold) = (gate(), gate());
    // Both gates let go however the test ends, so that a failed assertion
    // leaves no handler or reader blocked in the shared test process.
    let _release = ReleaseOnDrop(vec![open.clone(), hold.clone()]);
    let runs = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(AtomicBool::new(false));
    // Runs 0..64 and 64..128, where the replay threads are held, and
    // 128..192, which a fault on page 140 takes and installs, held.
    let rec = Record::new(PAGE, (192 * PAGE) as u64, "", 0..192).unwrap();
    let src = image(192);
    let r = Arc::new(
        UffdRegion::builder(192 * PAGE)
            .replay(rec)
            // Longer than the run is held: the watchdog must not claim it.
            .source_timeout(Duration::from_secs(30))
            .build(HoldsRun {
                runs: GatedRuns {
                    src: src.clone(),
                    open: open.clone(),
                    runs_read: runs.clone(),
                },
                held: 128,
                open: hold.clone(),
                reached: reached.clone(),
            })
            .unwrap(),
    );
    wait_for("the replay starts", || {
        runs.load(Ordering::SeqCst) >= gated::HELD
    });
    let (r2, src2) = (r.clone(), src.clone());
    let reader = std::thread::spawn(move || page_is(&r2, &src2, 140));
    wait_for("the fault reads its run", || reached.load(Ordering::SeqCst));
    // The replay's threads install their runs, find the third taken, and
    // end; the fault's run is still held.
    release(&open);
    wait_for("the replay threads' runs", || {
        r.stats().pages_prefetched == 128
    });
    // The threads end right after; a `wait_replayed` blind to the fault's
    // run would return once they had, inside its 300 ms.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !r.wait_replayed(Duration::from_millis(300)),
        "wait_replayed returned while a fault still installed its run: {} pages resident",
        r.resident_pages()
    );
    release(&hold);
    let r2 = r.clone();
    assert!(bounded("the replay's end", move || r2
        .wait_replayed(Duration::from_secs(3600))));
    // Done means in: every recorded page, without another fault.
    assert_eq!(r.resident_pages(), 192);
    assert!(reader.join().unwrap());
    for p in 0..192 {
        assert!(page_is(&r, &src, p), "page {p}");
    }
    assert_eq!(r.stats().faults, 1);
}

/// A fault on a page the record lacks takes no run, not even the one
/// that ends just before it: its window is its own (order 0: the page).
#[test]
fn a_fault_outside_the_record_takes_no_run() {
    let _hang = mmbatch_testkit::hang_guard("a_fault_outside_the_record_takes_no_run");
    // Runs 0..64, 64..128 (the replay threads stuck in them), 128..192;
    // pages 192.. are not recorded.
    let (r, open) = stuck_replay_of(256, 0..192);
    let src = image(256);
    for (p, resident) in [(192, 1), (250, 2), (191, 66)] {
        let (r2, src2) = (r.clone(), src.clone());
        assert!(bounded("a fault", move || page_is(&r2, &src2, p)));
        assert_eq!(r.resident_pages(), resident, "after page {p}");
    }
    release(&open);
    let r2 = r.clone();
    assert!(bounded("the replay's end", move || r2
        .wait_replayed(Duration::from_secs(3600))));
    assert_eq!(r.stats().pages_prefetched, 128);
}

#[test]
fn discarded_pages_read_back_as_zeros() {
    let _hang = mmbatch_testkit::hang_guard("discarded_pages_read_back_as_zeros");
    let src = image(64);
    let mut r = Arc::new(UffdRegion::new(64 * PAGE, 0, src.clone(), 1).unwrap());
    assert!(page_is(&r, &src, 5));
    // Pages 5 (filled) and 6 (never touched) discarded: zeros from now
    // on, as anonymous memory reads after MADV_DONTNEED; page 9 was not
    // discarded and still reads the image.
    let r2 = r.clone();
    bounded("madvise(MADV_DONTNEED)", move || discard(&r2, 5..7));
    assert!(
        page_is_zero(&r, 5),
        "a discarded page read back the source's data"
    );
    assert!(page_is_zero(&r, 6));
    assert!(page_is(&r, &src, 9));
    let st = r.stats();
    assert!(st.remove_events >= 1 && st.pages_zeroed == 2, "{st:?}");
    // A discarded page can be written and discarded again (the discard's
    // thread has dropped its handle: this one is the only one).
    Arc::get_mut(&mut r)
        .expect("the only handle")
        .as_mut_slice()[5 * PAGE] = 42;
    assert_eq!(byte(&r, 5 * PAGE), 42);
    let r2 = r.clone();
    bounded("a second discard", move || discard(&r2, 5..6));
    assert!(page_is_zero(&r, 5));
}

/// A window that ends at the region's last page, copied after a discard
/// elsewhere (so every copy checks its pages against the discards): the
/// whole window arrives, nothing fails, and no handler thread panics —
/// not even one the handler would catch with the page already right (the
/// discard bitmap ends with the region): run in a child whose panic hook
/// aborts.
#[test]
fn a_window_at_the_region_end_is_copied_after_a_discard() {
    let name = "a_window_at_the_region_end_is_copied_after_a_discard";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(30)) {
        run.expect_success();
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        eprintln!("{info}");
        std::process::abort();
    }));
    let _hang = mmbatch_testkit::hang_guard(name);
    let src = image(64);
    let r = Arc::new(UffdRegion::new(64 * PAGE, 4, src.clone(), 1).unwrap());
    let r2 = r.clone();
    bounded("madvise(MADV_DONTNEED)", move || discard(&r2, 0..1));
    // The event is marked just after the kernel lets madvise go.
    wait_for("the REMOVE event read", || r.stats().remove_events >= 1);
    // Page 60's window is 48..64, the region's last 16 pages.
    let (r2, src2) = (r.clone(), src.clone());
    assert!(bounded("a fault at the region's end", move || page_is(
        &r2, &src2, 60
    )));
    assert!(r.failure().is_none(), "{:?}", r.failure());
    for p in 48..64 {
        assert!(page_is(&r, &src, p), "page {p}");
    }
    assert_eq!(r.stats().faults, 1);
}

#[test]
fn a_discard_during_replay_is_not_undone_by_it() {
    let _hang = mmbatch_testkit::hang_guard("a_discard_during_replay_is_not_undone_by_it");
    // The replay reads its first run (pages 0..64), blocked; meanwhile
    // the application discards pages 0..32 and its madvise returns. The
    // replay then copies its run: the discarded pages must stay zeros.
    let (r, open) = stuck_replay(256);
    let src = image(256);
    let r2 = r.clone();
    bounded("madvise during replay", move || discard(&r2, 0..32));
    release(&open);
    let r2 = r.clone();
    assert!(bounded("the replay ends", move || r2
        .wait_replayed(Duration::from_secs(10))));
    for p in 0..32 {
        assert!(
            page_is_zero(&r, p),
            "page {p}: the replay put back discarded data"
        );
    }
    for p in 32..256 {
        assert!(page_is(&r, &src, p), "page {p}");
    }
}

#[test]
fn a_copy_refused_while_a_remove_is_pending_goes_on_after_it() {
    let _hang =
        mmbatch_testkit::hang_guard("a_copy_refused_while_a_remove_is_pending_goes_on_after_it");
    // One handler and one replay thread; discards keep coming while the
    // replay copies, so copies meet EAGAIN (a REMOVE not yet read). With a
    // handler that only retried, the replay or the madvise would hang.
    let src = image(2048);
    let rec = Record::new(PAGE, (2048 * PAGE) as u64, "", 0..2048).unwrap();
    let r = Arc::new(
        UffdRegion::builder(2048 * PAGE)
            .replay(rec)
            .build(src.clone())
            .unwrap(),
    );
    let r2 = r.clone();
    bounded("discards during replay", move || {
        for i in 0..200 {
            let p = (i * 37) % 2040;
            discard(&r2, p..p + 4);
        }
    });
    let r2 = r.clone();
    assert!(bounded("the replay ends", move || r2
        .wait_replayed(Duration::from_secs(10))));
    // Every page reads either its image data or, if discarded, zeros.
    let discarded: std::collections::HashSet<usize> = (0..200)
        .flat_map(|i| {
            let p = (i * 37) % 2040;
            p..p + 4
        })
        .collect();
    for p in 0..2048 {
        if discarded.contains(&p) {
            assert!(page_is_zero(&r, p), "page {p}");
        } else {
            assert!(page_is(&r, &src, p), "page {p}");
        }
    }
    assert!(r.stats().remove_events >= 200, "{:?}", r.stats());
}

#[test]
fn a_handler_refused_while_a_remove_is_pending_reads_it_and_goes_on() {
    let _hang = mmbatch_testkit::hang_guard(
        "a_handler_refused_while_a_remove_is_pending_reads_it_and_goes_on",
    );
    // One handler copying 16-page windows for a reader while another
    // thread discards: the handler's copies meet EAGAIN with a REMOVE
    // pending that only it can read. A handler that only retried would
    // give up at the source timeout and fail the page (SIGBUS).
    let src = image(4096);
    let r = Arc::new(
        UffdRegion::builder(4096 * PAGE)
            .order(4)
            .source_timeout(Duration::from_secs(2))
            .build(src.clone())
            .unwrap(),
    );
    let reader = {
        let r = r.clone();
        std::thread::spawn(move || (0..4096).map(|p| byte(&r, p * PAGE) as u64).sum::<u64>())
    };
    let r2 = r.clone();
    bounded("discards during faults", move || {
        for i in 0..300 {
            let p = (i * 53) % 4090;
            discard(&r2, p..p + 2);
        }
    });
    bounded("the reader", move || reader.join().unwrap());
    assert!(r.failure().is_none(), "{:?}", r.failure());
    assert_eq!(r.stats().pages_failed, 0);
}

/// A source counting the bytes read from it.
struct Counting {
    src: Vec<u8>,
    bytes: Arc<AtomicUsize>,
}

impl PageSource for Counting {
    fn len(&self) -> u64 {
        self.src.len() as u64
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.bytes.fetch_add(buf.len(), Ordering::SeqCst);
        self.src.read_page(index, buf)
    }
}

fn ws_file(rec: &Record, src: &[u8]) -> std::fs::File {
    let mut bytes = Vec::new();
    rec.write_pages(&src.to_vec(), &mut bytes).unwrap();
    tempfile(&bytes)
}

/// `write_pages` streams: each run's pages are written before the next
/// run is read, so a working set of many gigabytes needs one run's
/// buffer, not the whole set in memory.
#[test]
fn a_working_set_file_is_written_a_run_at_a_time() {
    struct Counted(Vec<u8>, Arc<AtomicUsize>);
    impl PageSource for Counted {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            self.1.fetch_add(1, Ordering::SeqCst);
            let at = index as usize * PAGE;
            buf.copy_from_slice(&self.0[at..at + PAGE]);
            PageRead::Ready
        }
    }
    /// The source's page reads at each write, and the bytes written.
    struct Writes(Arc<AtomicUsize>, Vec<(usize, usize)>);
    impl std::io::Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.1.push((self.0.load(Ordering::SeqCst), b.len()));
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let src = image(256);
    let reads = Arc::new(AtomicUsize::new(0));
    // Three runs: 10, 64 and 6 pages.
    let rec = Record::new(PAGE, src.len() as u64, "", (0..10).chain(100..170)).unwrap();
    let mut w = Writes(reads.clone(), Vec::new());
    rec.write_pages(&Counted(src.clone(), reads.clone()), &mut w)
        .unwrap();
    // The header before any read, each run's pages as soon as they are
    // read, the three CRCs last.
    assert_eq!(
        w.1,
        [
            (0, 24),
            (10, 10 * PAGE),
            (74, 64 * PAGE),
            (80, 6 * PAGE),
            (80, 12)
        ]
    );
    // And the file it wrote replays.
    let r = UffdRegion::builder(256 * PAGE)
        .replay(rec.clone())
        .replay_pages(ws_file(&rec, &src))
        .build(src.clone())
        .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(10)));
    assert_eq!(r.stats().pages_prefetched, 80);
    for &p in rec.pages() {
        assert!(page_is(&r, &src, p as usize), "page {p}");
    }
}

/// A record of no pages (a run that touched nothing) writes a working-set
/// file of its header alone, 24 bytes, which replays: nothing installed,
/// every page faulted in.
#[test]
fn an_empty_record_and_its_working_set_file_replay() {
    let _hang = mmbatch_testkit::hang_guard("an_empty_record_and_its_working_set_file_replay");
    let src = image(16);
    let rec = Record::new(PAGE, src.len() as u64, "", []).unwrap();
    let mut ws = Vec::new();
    rec.write_pages(&src, &mut ws).unwrap();
    assert_eq!(ws.len(), 24);
    let r = UffdRegion::builder(16 * PAGE)
        .replay(rec)
        .replay_pages(tempfile(&ws))
        .build(src.clone())
        .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(10)));
    assert_eq!(r.stats().pages_prefetched, 0);
    assert!(page_is(&r, &src, 3));
}

#[test]
fn replay_reads_a_working_set_file_not_the_image() {
    let _hang = mmbatch_testkit::hang_guard("replay_reads_a_working_set_file_not_the_image");
    let src = image(1024);
    // 692 pages: more than one read of the working-set file holds (2
    // MiB), so a later batch is read from its own offset in the file.
    let rec = Record::new(
        PAGE,
        src.len() as u64,
        "img",
        (600..1000).chain(10..300).chain([5, 1010]),
    )
    .unwrap();
    let bytes = Arc::new(AtomicUsize::new(0));
    let r = UffdRegion::builder(1024 * PAGE)
        .image_id("img")
        .replay(rec.clone())
        .replay_pages(ws_file(&rec, &src))
        .build(Counting {
            src: src.clone(),
            bytes: bytes.clone(),
        })
        .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(10)));
    assert_eq!(bytes.load(Ordering::SeqCst), 0, "the replay read the image");
    assert_eq!(r.stats().replay_runs_refused, 0);
    assert_eq!(r.stats().pages_prefetched, 692);
    for &p in rec.pages() {
        assert!(page_is(&r, &src, p as usize), "page {p}");
    }
    assert_eq!(r.stats().faults, 0);
}

#[test]
fn a_working_set_file_of_another_record_or_corrupt_is_refused() {
    let _hang =
        mmbatch_testkit::hang_guard("a_working_set_file_of_another_record_or_corrupt_is_refused");
    let src = image(256);
    let rec = Record::new(PAGE, src.len() as u64, "", 0..64).unwrap();
    let other = Record::new(PAGE, src.len() as u64, "", 64..128).unwrap();
    let build = |file| {
        UffdRegion::builder(256 * PAGE)
            .replay(rec.clone())
            .replay_pages(file)
            .build(src.clone())
    };
    match build(ws_file(&other, &src)) {
        // Named as a file written for another record, with the fix.
        Err(e @ Error::WorkingSetFile { .. }) => {
            let e = e.to_string();
            assert!(e.contains("written for a record of CRC-32"), "{e}");
            assert!(e.contains("Record::write_pages"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let mut good = Vec::new();
    rec.write_pages(&src, &mut good).unwrap();
    // The header's page size (bytes 12..16) or run count (16..24) alone
    // changed: either is the record's no more.
    let changed = |at: usize| {
        let mut b = good.clone();
        b[at] ^= 1;
        b
    };
    // A working-set file of the first format (version 1).
    let mut v1 = good.clone();
    v1[7] = 1;
    for (bytes, says) in [
        (v1, "version 1"),
        (b"junk".repeat(100), "magic"),
        (good[..good.len() - PAGE].to_vec(), "bytes"),
        (changed(13), "page size or run count"),
        (changed(16), "page size or run count"),
    ] {
        match build(tempfile(&bytes)) {
            Err(e @ Error::WorkingSetFile { .. }) => assert!(e.to_string().contains(says), "{e}"),
            other => panic!("{other:?}"),
        }
    }
    // A working-set file alone, without its record.
    let alone = UffdRegion::builder(256 * PAGE)
        .replay_pages(tempfile(&good))
        .build(src.clone());
    assert!(
        matches!(
            alone,
            Err(Error::BadSetting {
                setting: "replay_pages",
                ..
            })
        ),
        "{alone:?}"
    );
    // A run whose bytes changed: not installed; its pages fault in from
    // the image instead.
    let mut bad = good.clone();
    // A byte of the last page, before the one run's 4-byte CRC.
    let n = bad.len() - 4;
    bad[n - 10] ^= 0xff;
    let r = build(tempfile(&bad)).unwrap();
    assert!(r.wait_replayed(Duration::from_secs(10)));
    assert_eq!(r.stats().replay_runs_refused, 1);
    for p in 0..64 {
        assert!(page_is(&r, &src, p), "page {p}");
    }
    // Three runs read in one batch, the middle one's bytes changed: only
    // it is refused; its neighbours in the batch are installed.
    let three: Vec<u64> = (0..10).chain(20..30).chain(40..50).collect();
    let rec = Record::new(PAGE, src.len() as u64, "", three.clone()).unwrap();
    let mut ws = Vec::new();
    rec.write_pages(&src, &mut ws).unwrap();
    // The pages follow a 24-byte header (their CRCs come after them).
    let head = 24;
    ws[head + 15 * PAGE] ^= 0xff;
    let r = UffdRegion::builder(256 * PAGE)
        .replay(rec)
        .replay_pages(tempfile(&ws))
        .build(src.clone())
        .unwrap();
    assert!(r.wait_replayed(Duration::from_secs(10)));
    let st = r.stats();
    assert_eq!(
        (st.replay_runs_refused, st.pages_prefetched),
        (1, 20),
        "{st:?}"
    );
    for p in three {
        assert!(page_is(&r, &src, p as usize), "page {p}");
    }
}

#[test]
fn over_a_page_cache_replay_maps_the_cached_pages_in_place() {
    let _hang =
        mmbatch_testkit::hang_guard("over_a_page_cache_replay_maps_the_cached_pages_in_place");
    let src = image(512);
    let cache = UffdRegion::page_cache_from(&src, src.len()).unwrap();
    let rec = Record::new(PAGE, src.len() as u64, "shm", (100..200).chain(300..310)).unwrap();
    // A working-set file beside the record changes nothing: the cached
    // pages are mapped in place, not copied from it.
    for with_file in [false, true] {
        let mut b = UffdRegion::builder(512 * PAGE)
            .image_id("shm")
            .replay(rec.clone());
        if with_file {
            b = b.replay_pages(ws_file(&rec, &src));
        }
        // SAFETY: the memfd is this test's own; nothing writes or
        // truncates it.
        let r = unsafe { b.build_over_page_cache(&cache) }.unwrap();
        assert!(r.wait_replayed(Duration::from_secs(10)));
        let st = r.stats();
        assert_eq!(
            (st.pages_prefetched, st.replay_runs_refused),
            (110, 0),
            "{with_file}: {st:?}"
        );
        assert_eq!(st.faults, 0);
        for p in (100..200).chain(300..310) {
            assert!(page_is(&r, &src, p), "page {p}");
        }
        assert_eq!(r.stats().faults, 0, "the replayed pages are mapped");
        assert!(page_is(&r, &src, 5));
        assert_eq!(r.stats().faults, 1);
    }
}

/// A source that claims its pages are ready without writing them: what a
/// working-set file is made of does not matter below, only its size.
struct Untouched(u64);

impl PageSource for Untouched {
    fn len(&self) -> u64 {
        self.0
    }
    fn read_page(&self, _: u64, _: &mut [u8]) -> PageRead {
        PageRead::Ready
    }
}

/// A working-set file of a one-page record of 1 GiB pages: its bounce
/// buffer was REPLAY_RUN (64) pages whatever the runs, 64 GiB, and the
/// allocation aborted the process on this 24 GiB host (in a child, with a
/// bounded wait; seen: "memory allocation of 68719476736 bytes failed").
/// Now it is as long as the longest run.
#[test]
fn a_working_set_file_of_huge_pages_allocates_by_its_runs() {
    let name = "a_working_set_file_of_huge_pages_allocates_by_its_runs";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(60)) {
        run.expect_success();
        return;
    }
    let gib = 1u64 << 30;
    let record = Record::new(1 << 30, 4 * gib, "huge", [2]).unwrap();
    record
        .write_pages(&Untouched(4 * gib), std::io::sink())
        .unwrap();
}

/// A page cache filled from a source shorter than it: read past the
/// source's end (`Zeroes` ignores the length), 2^33 pages of tmpfs for
/// 2^45 bytes. Now refused, as `build` refuses it.
// Sizes past a 32-bit address space.
#[cfg(target_pointer_width = "64")]
#[test]
fn a_page_cache_longer_than_its_source_is_refused() {
    let _hang = mmbatch_testkit::hang_guard("a_page_cache_longer_than_its_source_is_refused");
    let e = UffdRegion::page_cache_from(&Untouched(PAGE as u64), 1 << 45).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SourceTooShort {
                source_len: 4096,
                ..
            }
        ),
        "{e}"
    );
}

/// A page-cache region takes its pages from its file: `huge_pages` there
/// was silently ignored (the region served base pages); now refused by
/// name, before any userfaultfd is opened.
#[test]
fn huge_pages_over_a_page_cache_are_refused() {
    let file = UffdRegion::page_cache_from(&vec![3u8; 4 * PAGE], 4 * PAGE).unwrap();
    // SAFETY: the memfd is this test's own; nothing else writes or
    // truncates it.
    let e = unsafe {
        UffdRegion::builder(4 * PAGE)
            .huge_pages(mmbatch_faultaround::HugePageSize::Size2M)
            .build_over_page_cache(&file)
    }
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "huge_pages",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("drop huge_pages"), "{e}");
}

/// A memfd sealed against writes (as a file handed over to be served
/// unchanged may be): the region's shared, writable mapping of it is
/// refused by the kernel (EPERM), and the error names the seal and the
/// seals that keep the file unchanged without it; sealed against
/// truncation only, the file is served.
#[test]
fn a_write_sealed_page_cache_is_refused_by_name() {
    use rustix::fs::{MemfdFlags, SealFlags};
    for seal in [SealFlags::WRITE, SealFlags::FUTURE_WRITE, SealFlags::SHRINK] {
        let fd =
            rustix::fs::memfd_create("sealed", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .unwrap();
        let file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut &file, &vec![5u8; 4 * PAGE]).unwrap();
        rustix::fs::fcntl_add_seals(&file, seal).unwrap();
        // SAFETY: the memfd is this test's own; nothing else writes or
        // truncates it.
        let r = unsafe { UffdRegion::over_page_cache(&file, 4 * PAGE, 2, 1) };
        if seal == SealFlags::SHRINK {
            let r = r.unwrap();
            assert!(r.as_slice().iter().all(|&b| b == 5));
            continue;
        }
        let e = r.unwrap_err();
        assert!(matches!(e, Error::FileSealed { .. }), "{seal:?}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("F_SEAL_WRITE") && msg.contains("F_SEAL_SHRINK"),
            "{msg}"
        );
    }
}

/// A page cache of an image larger than the machine's memory: filled
/// until the OOM killer took a process (`Zeroes(1 << 50)` killed this
/// host's shell). Now refused before the memfd is made. In a child whose
/// files may not pass 64 MiB (`RLIMIT_FSIZE`, which holds a memfd too), so
/// that the old code fails there (at `ftruncate`, with `SIGXFSZ`) rather
/// than filling the machine; and a region larger than any address space
/// is refused by name.
// Sizes past a 32-bit address space.
#[cfg(target_pointer_width = "64")]
#[test]
fn an_image_larger_than_memory_is_refused_before_a_byte_is_written() {
    let name = "an_image_larger_than_memory_is_refused_before_a_byte_is_written";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    mmbatch_testkit::child::lower_rlimit(mmbatch_testkit::child::Rlimit::FileSize, 64 << 20);
    let pib = 1usize << 50;
    let e = UffdRegion::page_cache_from(&mmbatch_faultaround::Zeroes(pib as u64), pib).unwrap_err();
    let Error::ImageTooLarge { len, room } = e else {
        panic!("{e}")
    };
    assert_eq!(len, pib);
    assert!(room < pib as u64, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("1 PiB (1125899906842624 bytes)"), "{msg}");
    assert!(
        msg.contains("OOM") && msg.contains("over_page_cache"),
        "{msg}"
    );
    // A page cache of nothing is a length error, as a region of nothing is.
    let e = UffdRegion::page_cache_from(&mmbatch_faultaround::Zeroes(0), 0).unwrap_err();
    assert!(matches!(e, Error::BadLength { len: 0, .. }), "{e}");
    // 2^62 bytes: more than any address space has room for. It was
    // "mmap failed: Cannot allocate memory (os error 12)".
    let huge = 1usize << 62;
    match UffdRegion::new(huge, 0, mmbatch_faultaround::Zeroes(huge as u64), 1) {
        Err(Error::NoPermission { .. } | Error::Unsupported { .. }) => {
            println!("skipped the region: no userfaultfd here");
        }
        Err(e @ Error::MapRefused { len, .. }) => {
            assert_eq!(len, huge);
            let msg = e.to_string();
            assert!(msg.contains("4 EiB (4611686018427387904 bytes)"), "{msg}");
            assert!(msg.contains("ask for a shorter region"), "{msg}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a region of 2^62 bytes was mapped"),
    }
}

/// A page whose handler installed it and stalled in a neighbour's read,
/// discarded by a balloon meanwhile, reads as discarded (zeros) once the
/// watchdog claims the stalled handler and lets its reader go, and
/// nothing is failed. In a child: a failure would be a fatal signal.
#[test]
fn a_discarded_page_of_a_stalled_handler_is_not_failed() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let name = "a_discarded_page_of_a_stalled_handler_is_not_failed";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    static CALLS_FOR_FIVE: AtomicUsize = AtomicUsize::new(0);
    static LET_GO: AtomicBool = AtomicBool::new(false);
    /// The image's bytes; the first read of page 5 is held until the
    /// test lets it go (30 s at most).
    struct FirstFiveStalls(Vec<u8>);
    impl PageSource for FirstFiveStalls {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
            if index == 5 && CALLS_FOR_FIVE.fetch_add(1, Ordering::SeqCst) == 0 {
                let until = std::time::Instant::now() + Duration::from_secs(30);
                while !LET_GO.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            let at = index as usize * PAGE;
            buf.copy_from_slice(&self.0[at..at + PAGE]);
            PageRead::Ready
        }
    }
    let src = image(16);
    let r = Arc::new(
        UffdRegion::builder(16 * PAGE)
            .order(1)
            .handlers(2)
            // Long enough that the discard below comes first however
            // loaded the host (ten times so under emulation).
            .source_timeout(mmbatch_testkit::child::scaled(Duration::from_secs(1)))
            .build(FirstFiveStalls(src.clone()))
            .unwrap(),
    );
    // Page 4's window is pages 4 and 5: its handler copies page 4, then
    // stalls in page 5's first read, its reader still waiting.
    let r2 = r.clone();
    let reader = std::thread::spawn(move || byte(&r2, 4 * PAGE));
    mmbatch_testkit::wait_until("page 5's first read", Duration::from_secs(5), || {
        CALLS_FOR_FIVE.load(Ordering::SeqCst) == 1
    });
    std::thread::sleep(Duration::from_millis(20));
    discard(&r, 4..5);
    // Past the source timeout the watchdog claims the stalled handler,
    // fails nothing, and lets the reader go: it finds page 4 discarded.
    assert_eq!(reader.join().unwrap(), 0);
    LET_GO.store(true, Ordering::SeqCst);
    assert!(r.failure().is_none(), "{:?}", r.failure());
    assert_eq!(r.stats().pages_failed, 0);
    assert!(page_is(&r, &src, 5));
}
