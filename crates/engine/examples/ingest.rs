//! Quick ingest probe: `cargo run --release -p roamkv-engine --example ingest -- DIR THREADS SECONDS sync|none`.
//! Prints MB/s of user data and the engine's write amplification. Not a benchmark (see roamkv bench).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use roamkv_engine::{Durability, Engine, Options, Record};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .ok_or("usage: ingest DIR THREADS SECONDS sync|none")?;
    let threads: usize = args.get(2).map_or(Ok(4), |s| s.parse())?;
    let seconds: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let durability = Durability::parse(args.get(4).map_or("none", |s| s)).ok_or("durability")?;
    let engine = Arc::new(Engine::open(
        dir,
        Options {
            durability,
            management_time_ms: 5_000,
            ..Options::default()
        },
    )?);
    let stop = Arc::new(AtomicBool::new(false));
    let records = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (engine, stop, records) = (engine.clone(), stop.clone(), records.clone());
            std::thread::spawn(move || -> Result<(), roamkv_engine::Error> {
                let value = vec![7u8; 1000];
                let mut ts = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let device = format!("dev-{t}-{}", ts / 2000);
                    let batch: Vec<Record<'_>> = (0..16)
                        .map(|i| Record {
                            device: &device,
                            sensor: "s",
                            ts_ns: ts + i,
                            value: &value,
                        })
                        .collect();
                    engine.put_batch(&batch)?;
                    ts += 16;
                    records.fetch_add(16, Ordering::Relaxed);
                    if ts % 2000 == 0 && (ts / 2000) % 10 != 0 {
                        engine.depart(&device)?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| "writer panicked")??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let s = engine.stats();
    println!(
        "{threads} threads {durability:?}: {:.0} records/s, {:.1} MB/s user, WA {:.3} (log {:.0} MB, prep {:.0} MB, lower {:.0} MB), {} groups, {} fdatasyncs, {} segments left the log",
        records.load(Ordering::Relaxed) as f64 / elapsed,
        s.user_bytes as f64 / elapsed / 1e6,
        s.write_amplification(),
        s.log_bytes_written as f64 / 1e6,
        s.log_preallocated_bytes as f64 / 1e6,
        s.lower_bytes_written as f64 / 1e6,
        s.group_commits,
        s.fdatasyncs,
        s.segments_aged
    );
    Ok(())
}
