//! How far the sink is behind the log: a task of its own samples the log's end every
//! `SAMPLE_INTERVAL` (whether the sink is connected or not) and sets the sink's lag from its
//! committed cursor: in bytes (what the log holds after the cursor) and in seconds (since the log's
//! end first passed the cursor). Sampling apart from the tail keeps the lag true during an outage,
//! when the tail reads nothing: a sink that is away for a minute shows a minute.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use roamkv_engine::{Engine, LogPos};
use tokio::sync::watch;

use crate::config::SinkStatus;

/// How often the log's end is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Samples kept: an hour at the interval's pace (older ones are dropped; a lag longer than that
/// shows as at least an hour).
const SAMPLES_MAX: usize = 36_000;

/// Runs until `stop`, or until the tail task ended (`tail_ended`): samples the log's end, sets `status.lag_bytes` and `status.lag_seconds`
/// from the committed cursor.
pub(crate) async fn run(
    engine: Arc<Engine>,
    status: Arc<Mutex<SinkStatus>>,
    cursor: watch::Receiver<Option<LogPos>>,
    mut stop: watch::Receiver<bool>,
    mut tail_ended: watch::Receiver<bool>,
) {
    let mut samples: VecDeque<(LogPos, Instant)> = VecDeque::new();
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tail_ended.changed() => return,
            _ = tick.tick() => {}
        }
        if *stop.borrow() || *tail_ended.borrow() {
            return;
        }
        let at = *cursor.borrow();
        let e = Arc::clone(&engine);
        let Ok((end, lag_bytes)) = tokio::task::spawn_blocking(move || {
            let end = e.feed().end();
            (end, at.map(|c| e.feed().lag_bytes(&c)))
        })
        .await
        else {
            return;
        };
        if samples
            .back()
            .is_none_or(|(last, _)| !last.same_place(&end))
        {
            samples.push_back((end, Instant::now()));
            if samples.len() > SAMPLES_MAX {
                samples.pop_front();
            }
        }
        let mut s = status.lock();
        match (at, lag_bytes) {
            (Some(cursor), Some(bytes)) => {
                s.lag_bytes = bytes;
                s.lag_seconds = seconds_behind(&mut samples, &cursor, bytes);
            }
            // No cursor yet (connecting, or a first scan): behind since the first sample.
            _ => {
                s.lag_seconds = samples
                    .front()
                    .map_or(0.0, |(_, t)| t.elapsed().as_secs_f64())
            }
        }
    }
}

/// Seconds since the log's end first passed `cursor` (0 when nothing is behind): the samples
/// the cursor has passed are dropped, the oldest left is when the lag began.
fn seconds_behind(samples: &mut VecDeque<(LogPos, Instant)>, cursor: &LogPos, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    let ahead = |end: &LogPos| (end.seq, end.offset) > (cursor.seq, cursor.offset);
    while samples.len() > 1 && !ahead(&samples[1].0) {
        samples.pop_front();
    }
    samples
        .iter()
        .find(|(end, _)| ahead(end))
        .map_or(0.0, |(_, seen)| seen.elapsed().as_secs_f64())
}
