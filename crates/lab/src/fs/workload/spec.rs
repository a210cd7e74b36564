//! What a file workload is: its access pattern, I/O mode and sync call (`Workload`, one row of the
//! results table), the byte offsets of one repetition, and which workloads a run executes (`Plan`).
use rand::SeedableRng;
use rand::seq::SliceRandom;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    SeqRead,
    RandRead,
    SeqWrite,
    RandWrite,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::SeqRead => "seq-read",
            Pattern::RandRead => "rand-read",
            Pattern::SeqWrite => "seq-write",
            Pattern::RandWrite => "rand-write",
        }
    }
    pub fn is_random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite)
    }
    pub fn is_read(self) -> bool {
        matches!(self, Pattern::SeqRead | Pattern::RandRead)
    }
    pub const ALL: [Pattern; 4] = [
        Pattern::SeqRead,
        Pattern::RandRead,
        Pattern::SeqWrite,
        Pattern::RandWrite,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoMode {
    Buffered,
    Direct,
}

impl IoMode {
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Buffered => "buffered",
            IoMode::Direct => "direct",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncCall {
    Fsync,
    Fdatasync,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncTarget {
    Overwrite,
    Append,
}

/// One workload = one row of the results table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    /// Paper 001: read or write a file in `block_bytes` requests.
    Transfer {
        pattern: Pattern,
        block_bytes: u64,
        file_bytes: u64,
        io: IoMode,
    },
    /// Paper 004 §5.2: `ops` times { write 4 KiB; fsync or fdatasync }.
    SyncWrite {
        call: SyncCall,
        random: bool,
        target: SyncTarget,
        io: IoMode,
        ops: u64,
    },
}

/// The write size of the paper-004 workload.
pub const SYNC_WRITE_BYTES: u64 = 4096;

impl Workload {
    pub fn name(&self) -> String {
        match *self {
            Workload::Transfer {
                pattern,
                block_bytes,
                file_bytes,
                io,
            } => {
                format!(
                    "{} {}KiB {}MB {}",
                    pattern.name(),
                    block_bytes / 1024,
                    file_bytes / 1_000_000,
                    io.name()
                )
            }
            Workload::SyncWrite {
                call,
                random,
                target,
                io,
                ..
            } => format!(
                "4KiB+{} {} {} {}",
                match call {
                    SyncCall::Fsync => "fsync",
                    SyncCall::Fdatasync => "fdatasync",
                },
                if random { "rand" } else { "seq" },
                match target {
                    SyncTarget::Overwrite => "overwrite",
                    SyncTarget::Append => "append",
                },
                io.name()
            ),
        }
    }

    pub fn paper(&self) -> &'static str {
        match self {
            Workload::Transfer { .. } => "001",
            Workload::SyncWrite { .. } => "004",
        }
    }

    pub fn io(&self) -> IoMode {
        match *self {
            Workload::Transfer { io, .. } | Workload::SyncWrite { io, .. } => io,
        }
    }

    /// Number of operations of one repetition and the bytes each moves.
    pub fn ops_and_bytes(&self, ops_max: u64) -> (u64, u64) {
        match *self {
            Workload::Transfer {
                block_bytes,
                file_bytes,
                ..
            } => (
                (file_bytes / block_bytes).clamp(1, ops_max.max(1)),
                block_bytes,
            ),
            Workload::SyncWrite { ops, .. } => (ops, SYNC_WRITE_BYTES),
        }
    }
}

/// Which workloads a `lab fs` run executes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub block_sizes_bytes: Vec<u64>,
    pub file_sizes_bytes: Vec<u64>,
    pub io_modes: Vec<IoMode>,
    pub repetitions: usize,
    pub ops_max: u64,
    pub sync_ops: u64,
    pub seed: u64,
    /// Trace one extra repetition of each sync workload (needs tracefs).
    pub trace_sync: bool,
}

impl Plan {
    /// The papers' full matrix: 1/4/16/64 KiB blocks, 10 and 100 MB files.
    pub fn full() -> Plan {
        Plan {
            block_sizes_bytes: vec![1024, 4096, 16384, 65536],
            file_sizes_bytes: vec![10_000_000, 100_000_000],
            io_modes: vec![IoMode::Buffered, IoMode::Direct],
            repetitions: 3,
            ops_max: 25_600,
            sync_ops: 1000,
            seed: 42,
            trace_sync: true,
        }
    }
    /// A few minutes in total: 4 and 64 KiB, 10 MB file, fewer operations.
    pub fn quick() -> Plan {
        Plan {
            block_sizes_bytes: vec![4096, 65536],
            file_sizes_bytes: vec![10_000_000],
            io_modes: vec![IoMode::Buffered, IoMode::Direct],
            repetitions: 3,
            ops_max: 2560,
            sync_ops: 200,
            seed: 42,
            trace_sync: true,
        }
    }

    pub fn workloads(&self) -> Vec<Workload> {
        let mut out = Vec::new();
        for &io in &self.io_modes {
            for &file_bytes in &self.file_sizes_bytes {
                for pattern in Pattern::ALL {
                    for &block_bytes in &self.block_sizes_bytes {
                        out.push(Workload::Transfer {
                            pattern,
                            block_bytes,
                            file_bytes,
                            io,
                        });
                    }
                }
            }
        }
        for &io in &self.io_modes {
            for call in [SyncCall::Fsync, SyncCall::Fdatasync] {
                for target in [SyncTarget::Overwrite, SyncTarget::Append] {
                    for random in [false, true] {
                        // Appending is sequential by definition: no random variant.
                        if target == SyncTarget::Append && random {
                            continue;
                        }
                        out.push(Workload::SyncWrite {
                            call,
                            random,
                            target,
                            io,
                            ops: self.sync_ops,
                        });
                    }
                }
            }
        }
        out
    }

    /// Image size large enough for the biggest file twice over plus file-system overhead.
    pub fn image_bytes(&self) -> u64 {
        let biggest = self
            .file_sizes_bytes
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.sync_ops * SYNC_WRITE_BYTES);
        (biggest * 3 + (256 << 20)).max(512 << 20)
    }
}

/// Byte offsets of one repetition: `ops` blocks of `block_bytes`, in order or as a seeded permutation.
pub fn offsets(random: bool, block_bytes: u64, ops: u64, seed: u64) -> Vec<u64> {
    let mut blocks: Vec<u64> = (0..ops).collect();
    if random {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        blocks.shuffle(&mut rng);
    }
    blocks.into_iter().map(|b| b * block_bytes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_offsets_step_by_block() {
        assert_eq!(offsets(false, 4096, 4, 1), vec![0, 4096, 8192, 12288]);
    }

    #[test]
    fn random_offsets_are_a_seeded_permutation() {
        let a = offsets(true, 1024, 1000, 7);
        let b = offsets(true, 1024, 1000, 7);
        let c = offsets(true, 1024, 1000, 8);
        assert_eq!(a, b, "same seed, same order");
        assert_ne!(a, c, "different seed, different order");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            offsets(false, 1024, 1000, 0),
            "every block exactly once"
        );
        assert_ne!(a, sorted, "actually shuffled");
    }

    #[test]
    fn ops_are_capped_and_cover_the_file() {
        let w = Workload::Transfer {
            pattern: Pattern::SeqRead,
            block_bytes: 1024,
            file_bytes: 100_000_000,
            io: IoMode::Buffered,
        };
        assert_eq!(w.ops_and_bytes(25_600), (25_600, 1024));
        let w = Workload::Transfer {
            pattern: Pattern::SeqRead,
            block_bytes: 65536,
            file_bytes: 10_000_000,
            io: IoMode::Direct,
        };
        assert_eq!(w.ops_and_bytes(25_600), (152, 65536));
    }

    #[test]
    fn plans_cover_the_papers_matrix() {
        let full = Plan::full().workloads();
        // 2 io modes x 2 file sizes x 4 patterns x 4 block sizes + 2 io x 2 calls x 3 variants.
        assert_eq!(full.len(), 2 * 2 * 4 * 4 + 2 * 2 * 3);
        assert!(
            full.iter()
                .any(|w| w.name() == "rand-write 1KiB 100MB direct")
        );
        assert!(
            full.iter()
                .any(|w| w.name() == "4KiB+fdatasync rand overwrite buffered")
        );
        assert!(!full.iter().any(|w| w.name().contains("rand append")));
        let quick = Plan::quick().workloads();
        assert!(quick.len() < full.len() / 2);
    }
}
