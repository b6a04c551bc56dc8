//! NUMA placement (hwlocality): each node's range runs on threads bound to
//! that node's CPUs. Placement is a pure function of the topology
//! ([`place`] over [`node_cpus`]), so it is tested with hwloc's synthetic
//! topologies on any machine.

use std::{fmt, ops::Range};

use hwlocality::{
    Topology,
    cpu::{binding::CpuBindingFlags, cpuset::CpuSet},
    memory::{
        binding::{MemoryBindingFlags, MemoryBindingPolicy},
        nodeset::NodeSet,
    },
    object::types::ObjectType,
};

use crate::{Job, JobError, RunError, run::run_bound};

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

/// Places each range on its node: the node's CPUs, and as many threads
/// as the job's split gives its range, at most one per CPU and at most
/// `max_threads_per_node`. A node without CPUs (memory only) runs on every
/// CPU of the machine.
pub fn place(
    nodes: &[NodeCpus],
    ranges: &[NodeRange],
    align: usize,
    min_chunk: usize,
    max_threads_per_node: usize,
) -> Result<Vec<Placement>, NumaError> {
    let all: Vec<usize> = {
        let mut v: Vec<usize> = nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    ranges
        .iter()
        .map(|r| {
            let n =
                nodes
                    .iter()
                    .find(|n| n.node == r.node)
                    .ok_or_else(|| NumaError::NoSuchNode {
                        node: r.node,
                        nodes: nodes.iter().map(|n| n.node).collect(),
                    })?;
            let cpus = if n.cpus.is_empty() {
                all.clone()
            } else {
                n.cpus.clone()
            };
            let job = Job {
                start: r.range.start,
                size: r.range.len(),
                align,
                min_chunk,
                max_threads: cpus.len().min(max_threads_per_node).max(1),
            };
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

/// Runs `f` over every node's range, each on threads bound to its node's
/// CPUs (`run_numa`): within a node as [`run_with_undo`](crate::run_with_undo)
/// (with `undo` over that node's finished chunks on failure); nodes run at
/// once. Binding is best effort: a host that refuses it (or has one node)
/// still runs the job, unbound. Returns the first node's error.
pub fn run_numa<E: Send>(
    topology: &Topology,
    ranges: &[NodeRange],
    align: usize,
    min_chunk: usize,
    max_threads_per_node: usize,
    f: impl Fn(Range<usize>) -> Result<(), E> + Sync,
    undo: impl Fn(Range<usize>) + Sync,
) -> Result<(), RunError<NumaJobError<E>>> {
    let placements = place(
        &node_cpus(topology),
        ranges,
        align,
        min_chunk,
        max_threads_per_node,
    )
    .map_err(|e| RunError::Failed(NumaJobError::Place(e)))?;
    let results: Vec<Result<(), RunError<E>>> = std::thread::scope(|s| {
        let handles: Vec<_> = placements
            .iter()
            .map(|p| {
                let (f, undo) = (&f, &undo);
                s.spawn(move || {
                    let mut set = CpuSet::new();
                    p.cpus.iter().for_each(|&c| set.set(c));
                    let bind = || {
                        let _ = topology.bind_cpu(&set, CpuBindingFlags::THREAD);
                    };
                    let job = Job {
                        start: p.range.start,
                        size: p.range.len(),
                        align,
                        min_chunk,
                        max_threads: p.threads,
                    };
                    run_bound(&job, &bind, f, undo)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for r in results {
        match r {
            Ok(()) => {}
            Err(RunError::Job(e)) => return Err(RunError::Job(e)),
            Err(RunError::Failed(e)) => return Err(RunError::Failed(NumaJobError::Chunk(e))),
        }
    }
    Ok(())
}

/// A NUMA job's failure.
#[derive(Debug)]
pub enum NumaJobError<E> {
    /// The ranges could not be placed.
    Place(NumaError),
    /// A chunk failed.
    Chunk(E),
}

impl<E: fmt::Display> fmt::Display for NumaJobError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumaJobError::Place(e) => write!(f, "{e}"),
            NumaJobError::Chunk(e) => write!(f, "{e}"),
        }
    }
}

/// Binds the pages of `memory` to NUMA node `node` (OS index)
/// (`hwloc_set_area_membind`, `MPOL_BIND`): pages touched from then on
/// come from that node, so bind a range before populating or clearing it.
pub fn bind_memory(topology: &Topology, memory: &[u8], node: usize) -> Result<(), String> {
    let mut set = NodeSet::new();
    set.set(node);
    topology
        .bind_memory_area(
            memory,
            &set,
            MemoryBindingPolicy::Bind,
            MemoryBindingFlags::empty(),
        )
        .map_err(|e| format!("binding memory to node {node}: {e}"))
}
