//! Shared set-up for the engine's integration tests.
#![allow(dead_code)]

pub mod fault_storage;
pub mod format_page;

use std::path::Path;
use std::sync::Arc;

use roamkv_engine::{Durability, Engine, LowerTierKind, ManualClock, Options};

pub const START_MS: u64 = 1_700_000_000_000;
pub const MANAGEMENT_MS: u64 = 10_000;

/// Options for deterministic tests: a manual clock, no background thread, 1 MiB segments.
pub fn options(clock: &Arc<ManualClock>) -> Options {
    Options {
        durability: Durability::Sync,
        management_time_ms: MANAGEMENT_MS,
        segment_bytes: 1 << 20,
        lower_memory_bytes: 8 << 20,
        background_maintenance: false,
        clock: clock.clone(),
        ..Options::default()
    }
}

pub fn open(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    Engine::open(dir, options(clock)).expect("open")
}

pub fn open_with(dir: &Path, clock: &Arc<ManualClock>, lower: LowerTierKind) -> Engine {
    Engine::open(
        dir,
        Options {
            lower_tier: lower,
            ..options(clock)
        },
    )
    .expect("open")
}

/// The segment files of a data directory, in log order.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir.join("log"))
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
}

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(START_MS))
}

/// Lets every reading written so far leave the log (if its device is still here): half a
/// management time seals the active segment, one more makes it due. Two maintenance rounds.
pub fn settle(engine: &Engine, clock: &ManualClock) {
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("maintain (seal)");
    clock.advance_ms(MANAGEMENT_MS);
    engine.maintain().expect("maintain (leave the log)");
}

/// A reading's value: its name, then bytes that look random (the lower tier compresses its
/// blocks; tests that size files by what they write need values that do not shrink).
pub fn value(device: &str, sensor: &str, ts: i64, len: usize) -> Vec<u8> {
    let seed = format!("{device}/{sensor}/{ts}/");
    // FNV-1a of the name seeds an xorshift: the same reading always gets the same value.
    let mut state = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    let noise = std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    });
    seed.bytes().chain(noise).take(len).collect()
}
