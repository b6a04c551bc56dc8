//! NUMA placement (hwlocality): each node's range runs on threads bound to
//! that node's CPUs. Placement is a pure function of the topology
//! ([`NumaJob::place`] over [`node_cpus`]), so it is tested with hwloc's synthetic
//! topologies on any machine.

use std::{
    fmt,
    ops::Range,
    sync::atomic::{AtomicBool, Ordering},
};

use hwlocality::{
    Topology,
    cpu::{binding::CpuBindingFlags, cpuset::CpuSet},
    memory::{
        binding::{MemoryBindingFlags, MemoryBindingPolicy},
        nodeset::NodeSet,
    },
    object::types::ObjectType,
};

/// The hwlocality this module's API takes ([`Topology`] and the rest): use
/// it rather than a dependency of your own, so that the versions match.
pub use hwlocality;

use crate::{
    Job, JobError, RunError,
    run::run_bound,
    sync::{Mutex, lock},
};

/// Work for one NUMA node: `range` of a job, to run near node `node` (its
/// OS index).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeRange {
    /// The node's OS index.
    pub node: usize,
    /// Its part of the work.
    pub range: Range<usize>,
}

/// A node and the CPUs (OS indices) it owns.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeCpus {
    /// The node's OS index.
    pub node: usize,
    /// Its CPUs; empty for a node without CPUs.
    pub cpus: Vec<usize>,
}

/// Where one node's range runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Placement {
    /// The node.
    pub node: usize,
    /// Its range.
    pub range: Range<usize>,
    /// CPUs its threads are bound to.
    pub cpus: Vec<usize>,
    /// Threads for it (the job's split, capped by its CPUs).
    pub threads: usize,
}

/// Why a NUMA job could not be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NumaError {
    /// A range names a node the topology lacks.
    NoSuchNode {
        /// The node asked for.
        node: usize,
        /// The nodes there are.
        nodes: Vec<usize>,
    },
    /// A node's range is not a valid job.
    Job(JobError),
    /// A range that ends before it starts (it would run nothing).
    Reversed(NodeRange),
    /// Two ranges share units, which would be worked twice.
    Overlap(NodeRange, NodeRange),
    /// hwloc refused to bind memory to a node that exists
    /// ([`bind_memory`]).
    Bind {
        /// The node.
        node: usize,
        /// hwloc's error.
        why: String,
    },
}

impl fmt::Display for NumaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumaError::NoSuchNode { node, nodes } => {
                write!(
                    f,
                    "NUMA node {node} does not exist: this topology has nodes {nodes:?}"
                )
            }
            NumaError::Job(e) => write!(f, "{e}"),
            NumaError::Reversed(r) => write!(
                f,
                "node {}'s range {:?} ends before it starts: give start..end with start <= end",
                r.node, r.range
            ),
            NumaError::Overlap(a, b) => write!(
                f,
                "node {}'s range {:?} and node {}'s range {:?} overlap: their shared units would \
                 be worked twice; give each unit to one node",
                a.node, a.range, b.node, b.range
            ),
            NumaError::Bind { node, why } => write!(
                f,
                "binding memory to NUMA node {node}: {why} (a cgroup's cpuset.mems or a \
                 seccomp filter may forbid it)"
            ),
        }
    }
}

impl std::error::Error for NumaError {}

/// The NUMA nodes of `topology` and their CPUs.
pub fn node_cpus(topology: &Topology) -> Vec<NodeCpus> {
    topology
        .objects_with_type(ObjectType::NUMANode)
        .map(|n| NodeCpus {
            node: n.os_index().unwrap_or(0),
            cpus: n
                .cpuset()
                .map(|s| s.iter_set().map(usize::from).collect())
                .unwrap_or_default(),
        })
        .collect()
}

/// A job split by NUMA node, as a [`Job`] is split by thread: each node's
/// range in chunks on multiples of `align` of at least `min_chunk` units,
/// on up to `max_threads_per_node` threads bound to that node's CPUs
/// (the `ktask_node` array and `ktask_ctl` that `ktask_run_numa` takes).
///
/// ```
/// use mmbatch_ktask::numa::{NodeCpus, NodeRange, NumaJob};
///
/// // 8 MiB for each of two 4-CPU nodes, in 2 MiB chunks on 4 KiB pages.
/// let job = NumaJob::new([
///     NodeRange { node: 0, range: 0..8 << 20 },
///     NodeRange { node: 1, range: 8 << 20..16 << 20 },
/// ])
/// .align(4096)
/// .min_chunk(2 << 20);
/// let nodes = [
///     NodeCpus { node: 0, cpus: vec![0, 1, 2, 3] },
///     NodeCpus { node: 1, cpus: vec![4, 5, 6, 7] },
/// ];
/// let p = job.place(&nodes).unwrap();
/// assert_eq!((p[1].cpus.as_slice(), p[1].threads), (&[4, 5, 6, 7][..], 4));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NumaJob {
    ranges: Vec<NodeRange>,
    align: usize,
    min_chunk: usize,
    max_threads_per_node: usize,
}

impl NumaJob {
    /// `ranges`, each to run near its node: no alignment, chunks of at
    /// least one unit, a thread per CPU of each node (at most
    /// [`MAX_THREADS`](crate::MAX_THREADS)).
    pub fn new(ranges: impl Into<Vec<NodeRange>>) -> Self {
        Self {
            ranges: ranges.into(),
            align: 1,
            min_chunk: 1,
            max_threads_per_node: crate::MAX_THREADS,
        }
    }

    /// With chunk boundaries on multiples of `align` (every range's start
    /// and length must be multiples of it; [`place`](Self::place) checks).
    #[must_use]
    pub fn align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// With `min_chunk` the least work worth a thread.
    #[must_use]
    pub fn min_chunk(mut self, min_chunk: usize) -> Self {
        self.min_chunk = min_chunk;
        self
    }

    /// With at most `max_threads` threads on each node (0 is refused, as
    /// [`Job::max_threads`] refuses it).
    #[must_use]
    pub fn max_threads_per_node(mut self, max_threads: usize) -> Self {
        self.max_threads_per_node = max_threads;
        self
    }

    /// The nodes' ranges.
    pub fn ranges(&self) -> &[NodeRange] {
        &self.ranges
    }

    /// Node `r`'s job, on `threads` threads.
    fn node_job(&self, r: &Range<usize>, threads: usize) -> Job {
        Job::with_all(r.start, r.len(), self.align, self.min_chunk, threads)
    }

    /// Places each range on its node: the node's CPUs, and as many threads
    /// as the job's split gives its range, at most one per CPU and at most
    /// `max_threads_per_node`. A node without CPUs (memory only) runs on
    /// every CPU of the machine. A pure function of `nodes` ([`node_cpus`]
    /// of a topology), so it can be tried on any machine.
    ///
    /// # Errors
    /// A node the topology lacks, a range that ends before it starts or
    /// that overlaps another (its units would run twice), or a range that
    /// is not a valid [`Job`] (misaligned, overflowing).
    pub fn place(&self, nodes: &[NodeCpus]) -> Result<Vec<Placement>, NumaError> {
        if let Some(r) = self.ranges.iter().find(|r| r.range.start > r.range.end) {
            return Err(NumaError::Reversed(r.clone()));
        }
        let mut sorted: Vec<&NodeRange> =
            self.ranges.iter().filter(|r| !r.range.is_empty()).collect();
        sorted.sort_by_key(|r| r.range.start);
        if let Some(w) = sorted
            .windows(2)
            .find(|w| w[1].range.start < w[0].range.end)
        {
            return Err(NumaError::Overlap(w[0].clone(), w[1].clone()));
        }
        let all: Vec<usize> = {
            let mut v: Vec<usize> = nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        self.ranges
            .iter()
            .map(|r| {
                let n = nodes.iter().find(|n| n.node == r.node).ok_or_else(|| {
                    NumaError::NoSuchNode {
                        node: r.node,
                        nodes: nodes.iter().map(|n| n.node).collect(),
                    }
                })?;
                let cpus = if n.cpus.is_empty() {
                    all.clone()
                } else {
                    n.cpus.clone()
                };
                let job = self.node_job(&r.range, cpus.len().max(1).min(self.max_threads_per_node));
                let threads = job.plan().map_err(NumaError::Job)?.threads;
                Ok(Placement {
                    node: r.node,
                    range: r.range.clone(),
                    cpus,
                    threads,
                })
            })
            .collect()
    }
}

/// Puts the calling thread's CPU binding back as it was when saved, on
/// drop (a panic included).
struct RestoreBinding<'a> {
    topology: &'a Topology,
    saved: Option<CpuSet>,
}

impl<'a> RestoreBinding<'a> {
    fn save(topology: &'a Topology) -> Self {
        let saved = topology.cpu_binding(CpuBindingFlags::THREAD).ok();
        Self { topology, saved }
    }
}

impl Drop for RestoreBinding<'_> {
    fn drop(&mut self) {
        if let Some(set) = &self.saved {
            let _ = self.topology.bind_cpu(set, CpuBindingFlags::THREAD);
        }
    }
}

/// Runs `f` over every node's range of `job`, each on threads bound to its
/// node's CPUs: [`run_numa_with_undo`] with nothing to undo.
#[doc(alias = "ktask_run_numa")]
pub fn run_numa<E: Send>(
    topology: &Topology,
    job: &NumaJob,
    f: impl Fn(Range<usize>) -> Result<(), E> + Sync,
) -> Result<(), NumaJobError<E>> {
    run_numa_with_undo(topology, job, f, |_| {})
}

/// Runs `f` over every node's range of `job`, each on threads bound to its
/// node's CPUs (`ktask_run_numa`): within a node as [`run_with_undo`](crate::run_with_undo);
/// nodes run at once. The first error anywhere stops every node (no chunk
/// starts after it), and `undo` then runs over every chunk that finished,
/// on every node, before the error is returned. A panic on one node stops
/// every node the same way, and every finished chunk is undone (the
/// panicking node's too), as for an error, before it reaches the caller. Binding is best effort: a
/// host that refuses it (or has one node) still runs the job, unbound; a
/// node whose thread the OS refuses runs on the caller.
///
/// # Errors
/// [`NumaJobError::Place`] where the job's ranges cannot be placed on the
/// topology's nodes (no chunk has run), or [`NumaJobError::Chunk`] with
/// the first chunk's error.
///
/// # Panics
/// With the first chunk's panic, once every finished chunk is undone.
pub fn run_numa_with_undo<E: Send>(
    topology: &Topology,
    job: &NumaJob,
    f: impl Fn(Range<usize>) -> Result<(), E> + Sync,
    undo: impl Fn(Range<usize>) + Sync,
) -> Result<(), NumaJobError<E>> {
    let placements = job
        .place(&node_cpus(topology))
        .map_err(NumaJobError::Place)?;
    // One stop for all nodes: a node's failure makes every other node's
    // next chunk fail with `Stopped`, which stops that node (and undoes
    // its finished chunks) too. The first error is kept here, not in the
    // failing node's result: a sibling thread that sees the stop before
    // the failing thread records its error would make the node's result
    // `Stopped`, and the failure was lost (`Ok` returned, finished nodes
    // left done).
    let first_error = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let node_f = |r: Range<usize>| -> Result<(), Stopped> {
        if stop.load(Ordering::Acquire) {
            return Err(Stopped);
        }
        // A panic stops every node too: the caller gets it once they stop,
        // not after the other nodes have done all their work.
        let _stop_on_panic = StopOnPanic(&stop);
        f(r).map_err(|e| {
            lock(&first_error).get_or_insert(e);
            stop.store(true, Ordering::Release);
            // Fail point `ktask::node_failed`: holds the failing thread
            // while its siblings see the stop.
            fail_point!("ktask::node_failed");
            Stopped
        })
    };
    let run_node = |p: &Placement| {
        let mut set = CpuSet::new();
        p.cpus.iter().for_each(|&c| set.set(c));
        let bind = || {
            let _ = topology.bind_cpu(&set, CpuBindingFlags::THREAD);
        };
        run_bound(&job.node_job(&p.range, p.threads), &bind, &node_f, &undo)
    };
    // Each node's result, or its panic: a panic is kept until every node
    // has stopped and the nodes that finished have been undone, as for an
    // error.
    type NodeResult = std::thread::Result<Result<(), RunError<Stopped>>>;
    let results: Vec<NodeResult> = std::thread::scope(|s| {
        let handles: Vec<_> = placements
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let run_node = &run_node;
                spawn_node(i, s, move || run_node(p)).map_err(|()| p)
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join(),
                // Refused a thread: this node runs here, bound to its
                // CPUs, and the caller's own binding is put back after
                // (left, the caller's thread — and every thread it started
                // later — stayed on that node's CPUs). Its panic is kept
                // as a node thread's is: unwound from here, it skipped
                // the undoing of the nodes that finished.
                Err(p) => {
                    let _restore = RestoreBinding::save(topology);
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_node(p)))
                }
            })
            .collect()
    });
    let panicked = results.iter().any(|r| r.is_err());
    for r in &results {
        // `place` made each node's job and planned it: it is valid.
        if let Ok(Err(RunError::Job(e))) = r {
            unreachable!("a placed node's job was refused: {e}");
        }
    }
    let first_error = first_error
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if first_error.is_none() && !panicked {
        return Ok(());
    }
    // Nodes that finished before the failure: undo all their chunks (a
    // node that failed or panicked has undone its own), each even if one
    // before it panicked.
    let finished = placements
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r, Ok(Ok(()))))
        .filter_map(|(p, _)| job.node_job(&p.range, p.threads).plan().ok())
        .flat_map(|plan| plan.chunks().collect::<Vec<_>>());
    let undo_panic = crate::run::undo_each(finished, &undo);
    if let Some(panic) = results.into_iter().find_map(Result::err).or(undo_panic) {
        std::panic::resume_unwind(panic);
    }
    Err(NumaJobError::Chunk(
        first_error.expect("no node panicked, so one failed"),
    ))
}

/// Sets the shared stop if dropped while a chunk panics.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A node's chunks stopped: its own chunk failed (the error is kept by
/// `run_numa_with_undo`) or another node's did.
struct Stopped;

/// Spawns node `i`'s thread in `s`; fail point `ktask::spawn_node` refuses
/// it as the OS would.
fn spawn_node<'scope, T: Send + 'scope>(
    i: usize,
    s: &'scope std::thread::Scope<'scope, '_>,
    body: impl FnOnce() -> T + Send + 'scope,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>, ()> {
    fail_point!("ktask::spawn_node", |_| Err(()));
    std::thread::Builder::new()
        .name(format!("ktask-node-{i}"))
        .spawn_scoped(s, body)
        .map_err(drop)
}

/// Why a NUMA job did not complete ([`run_numa_with_undo`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum NumaJobError<E> {
    /// The ranges could not be placed on the topology's nodes: no chunk
    /// ran.
    Place(NumaError),
    /// A chunk failed with this error (the first one, on any node): every
    /// node stopped, and the chunks that had finished went to the undo.
    Chunk(E),
}

impl<E: fmt::Display> fmt::Display for NumaJobError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumaJobError::Place(e) => write!(f, "the NUMA job was not started: {e}"),
            NumaJobError::Chunk(e) => write!(
                f,
                "a chunk failed (every node stopped, and the chunks that had finished went to \
                 the undo, if one was given): {e}"
            ),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for NumaJobError<E> {
    /// The placement's error; a chunk's error is shown in the message.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NumaJobError::Place(e) => Some(e),
            NumaJobError::Chunk(_) => None,
        }
    }
}

/// Binds the pages of `memory` to NUMA node `node` (OS index)
/// (`hwloc_set_area_membind` with its strict flag: the kernel's
/// `MPOL_BIND`): pages touched from then on come from that node only, so
/// bind a range before populating or clearing it. A node out of memory
/// reclaims, and then the kernel's OOM killer runs (or, for hugetlb
/// pages, whose reservation is not per node, a write to a page not yet
/// faulted in is `SIGBUS`: fault such a region in with
/// [`HugeRegion::populate`](crate::HugeRegion::populate), which returns
/// the error, first); [`prefer_memory`] falls back to other nodes
/// instead. The binding covers the whole pages `memory` touches, so memory
/// beside it on those pages is bound too.
#[doc(alias = "mbind")]
#[doc(alias = "hwloc_set_area_membind")]
pub fn bind_memory(topology: &Topology, memory: &[u8], node: usize) -> Result<(), NumaError> {
    set_memory_node(topology, memory, node, MemoryBindingFlags::STRICT)
}

/// Prefers NUMA node `node` (OS index) for the pages of `memory`
/// (`hwloc_set_area_membind`: the kernel's `MPOL_PREFERRED_MANY`, or
/// `MPOL_PREFERRED` before Linux 5.15): pages touched from then on come
/// from that node while it has free memory, and from the nearest other
/// nodes after, where [`bind_memory`] would reclaim or fail. The same
/// whole pages are covered.
#[doc(alias = "mbind")]
pub fn prefer_memory(topology: &Topology, memory: &[u8], node: usize) -> Result<(), NumaError> {
    set_memory_node(topology, memory, node, MemoryBindingFlags::empty())
}

/// [`bind_memory`] or [`prefer_memory`], by hwloc's `flags`.
fn set_memory_node(
    topology: &Topology,
    memory: &[u8],
    node: usize,
    flags: MemoryBindingFlags,
) -> Result<(), NumaError> {
    // A node the host does not have is refused here: hwloc's bitmaps
    // panic past their largest index, and grow to any index below it.
    let nodes = node_cpus(topology);
    if !nodes.iter().any(|n| n.node == node) {
        return Err(NumaError::NoSuchNode {
            node,
            nodes: nodes.iter().map(|n| n.node).collect(),
        });
    }
    let mut set = NodeSet::new();
    set.set(node);
    topology
        .bind_memory_area(memory, &set, MemoryBindingPolicy::Bind, flags)
        .map_err(|e| NumaError::Bind {
            node,
            why: e.to_string(),
        })
}
