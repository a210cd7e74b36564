//! The sink's loop: connect, find where this edge's cursor is (resume, gap, or new generation),
//! export the devices present by scanning when a snapshot is pending, then tail the log, one
//! transaction per batch. Every engine call runs on the blocking pool (they do file I/O). While a
//! batch commits, the next one is read from the log (`read_ahead`: a read changes nothing, and
//! one made from a position the sink then does not reach is dropped).
//!
//! Order of effects per batch (each a crash point): rows and cursor committed together in the
//! destination (`sink.before_commit` is inside the open transaction), then the engine's slot
//! moved (`sink.after_commit` comes between the two), then `sink.after_hold`. A crash anywhere
//! re-sends at most the batch whose commit it did not see, which the key makes harmless in a
//! table and which Kafka never shows a read_committed consumer twice: the batch is sent again
//! only from the position read back from Kafka, after the new producer aborted the open
//! transaction.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use roamkv_engine::limits::INTERNAL_DEVICE_PREFIX;
use roamkv_engine::{Engine, Error as EngineError, FeedBatch, FeedRecord, LogPos, ScanCursor};
use tokio::sync::watch;

use crate::config::{SLOT_NAME, SinkConfig, SinkStatus};
use crate::destination::Destination;
use crate::error::DbError;
use crate::rows::Rows;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between reconnection attempts: the sink resumes within about this long of
/// the database accepting connections again (plus a connection and one batch). A connection
/// attempt to a database that is away costs a refused connect or a timeout: twice a second is
/// cheap.
const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// After an error a retry cannot cure (schema, permissions), try again this much later: an
/// operator may have fixed it.
const FATAL_RETRY: Duration = Duration::from_secs(30);

pub(crate) struct Tail {
    engine: Arc<Engine>,
    config: SinkConfig,
    status: Arc<Mutex<SinkStatus>>,
    cursor_tx: watch::Sender<Option<LogPos>>,
    stop: watch::Receiver<bool>,
    db: Option<Destination>,
    generation: i64,
    /// Where the next read starts, and the position text the cursor row holds.
    position: LogPos,
    stored: String,
    /// Log bytes per record, as recently read: sizes the next read.
    bytes_per_record: usize,
}

impl Tail {
    pub(crate) fn new(
        engine: Arc<Engine>,
        config: SinkConfig,
        status: Arc<Mutex<SinkStatus>>,
        cursor_tx: watch::Sender<Option<LogPos>>,
        stop: watch::Receiver<bool>,
        db: Option<Destination>,
    ) -> Tail {
        let position = engine.feed().end();
        Tail {
            engine,
            config,
            status,
            cursor_tx,
            stop,
            db,
            generation: 0,
            stored: String::new(),
            position,
            bytes_per_record: 256,
        }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps, or returns early (true) when the server stops.
    async fn pause(&mut self, how_long: Duration) -> bool {
        tokio::select! {
            _ = self.stop.changed() => true,
            _ = tokio::time::sleep(how_long) => self.stopped(),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, DbError> {
        let engine = Arc::clone(&self.engine);
        tokio::task::spawn_blocking(move || f(&engine))
            .await
            .map_err(|e| DbError::Fatal(format!("engine task failed: {e}")))
    }

    fn set_state(&self, state: &str, error: Option<String>) {
        let mut status = self.status.lock();
        status.state = state.to_string();
        if error.is_some() {
            status.last_error = error;
        }
    }

    fn db(&mut self) -> &mut Destination {
        self.db.as_mut().expect("a session runs connected")
    }
}

/// The sink's task: sessions, and between them reconnection with backoff.
pub(crate) async fn run(mut t: Tail) {
    let mut backoff = BACKOFF_MIN;
    loop {
        if t.stopped() {
            return;
        }
        if t.db.is_none() {
            match Destination::connect(&t.config).await {
                Ok(db) => {
                    t.db = Some(db);
                    backoff = BACKOFF_MIN;
                }
                Err(e) => {
                    let wait = after_error(&t, &e, backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    if t.pause(wait).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let outcome = t.session().await;
        // Closed on the blocking pool: librdkafka's teardown joins its threads.
        if let Some(destination) = t.db.take() {
            let _ = tokio::task::spawn_blocking(move || drop(destination)).await;
        }
        match outcome {
            Ok(()) => return,
            Err(DbError::Fenced(message)) => {
                tracing::error!(%message, "cloud sink stopped");
                t.set_state("stopped", Some(message));
                return;
            }
            Err(e) => {
                let wait = after_error(&t, &e, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
                if t.pause(wait).await {
                    return;
                }
            }
        }
    }
}

/// Notes an error; returns how long to wait before the next try.
fn after_error(t: &Tail, error: &DbError, backoff: Duration) -> Duration {
    let (state, wait) = match error {
        DbError::Retryable(_) => ("disconnected", backoff),
        _ => ("stopped", FATAL_RETRY),
    };
    tracing::warn!(error = %error, "cloud sink: {state}");
    t.status.lock().retries_total += 1;
    t.set_state(state, Some(error.to_string()));
    wait
}

impl Tail {
    /// One connected session: establish the cursor, snapshot if pending, then tail until stop.
    async fn session(&mut self) -> Result<(), DbError> {
        self.set_state("connecting", None);
        if self.establish().await? {
            self.snapshot().await?;
        }
        self.publish();
        self.tail().await
    }

    /// Finds this edge's cursor and decides: resume (false), or a snapshot is pending (true)
    /// after a first start, a gap, or a new generation.
    async fn establish(&mut self) -> Result<bool, DbError> {
        let row = self.db().cursor().await?;
        let Some((generation, text, pending)) = row else {
            return self.start_generation(1, 0).await;
        };
        self.generation = generation;
        self.stored = text.clone();
        let checked = match text.parse::<LogPos>() {
            // A snapshot still pending keeps its hold past the cap (`hold_end`).
            Ok(pos) if pending => {
                self.blocking(move |e| e.feed().hold_for_snapshot(SLOT_NAME, &pos).map(|()| pos))
                    .await?
            }
            Ok(pos) => {
                self.blocking(move |e| e.feed().hold(SLOT_NAME, &pos).map(|()| pos))
                    .await?
            }
            Err(reason) => Err(EngineError::FeedDiverged {
                position: text,
                reason,
            }),
        };
        match checked {
            Ok(pos) => {
                self.position = pos;
                Ok(pending)
            }
            Err(EngineError::FeedGap { .. }) => {
                self.after_gap().await?;
                Ok(true)
            }
            Err(EngineError::FeedDiverged { reason, .. }) => {
                tracing::warn!(%reason, "cloud sink: the edge's log is not the one the cursor follows; new generation");
                self.start_generation(generation + 1, generation).await
            }
            Err(e) => Err(DbError::Fatal(format!("holding the log: {e}"))),
        }
    }

    /// A new history: from the log's end, after a snapshot.
    async fn start_generation(&mut self, generation: i64, replaces: i64) -> Result<bool, DbError> {
        let end = self.hold_end().await?;
        let text = end.to_string();
        self.db()
            .start_generation(generation, &text, replaces)
            .await?;
        roamkv_engine::crash_point("sink.after_generation");
        self.generation = generation;
        self.position = end;
        self.stored = text;
        self.status.lock().generations_started += 1;
        Ok(true)
    }

    /// The log no longer holds the cursor: tail from the end, after a snapshot of the devices.
    async fn after_gap(&mut self) -> Result<(), DbError> {
        let end = self.hold_end().await?;
        let text = end.to_string();
        let (generation, from) = (self.generation, self.stored.clone());
        self.db()
            .write(generation, &Rows::default(), Some((&from, &text, true)))
            .await?;
        self.position = end;
        self.stored = text;
        self.status.lock().gaps_total += 1;
        tracing::warn!(
            "cloud sink: gap in the log (the hold was released); exporting the devices present by scanning"
        );
        Ok(())
    }

    /// Holds the log from its end for a snapshot: past the cap until the sink tails again (the
    /// next `hold`), so that writes during a long scan cannot release the hold and send the
    /// sink into another gap and another scan without end (the engine's
    /// `Feed::hold_for_snapshot`).
    async fn hold_end(&self) -> Result<LogPos, DbError> {
        self.blocking(|e| {
            let end = e.feed().end();
            e.feed().hold_for_snapshot(SLOT_NAME, &end).map(|()| end)
        })
        .await?
        .map_err(|e| DbError::Fatal(format!("holding the log: {e}")))
    }

    /// Exports every reading of every device present (idempotent), then clears the pending
    /// flag. Tailing from the position held before the scan then covers what came during it.
    async fn snapshot(&mut self) -> Result<(), DbError> {
        self.set_state("snapshot", None);
        // As of one read view: what it holds is exported, and a destination that is no keyed
        // table (Kafka) leaves it out of the tail that follows (`exported_by_scan`).
        let view = self
            .blocking(|e| e.read_view())
            .await?
            .map_err(|e| DbError::Fatal(format!("taking a read view: {e}")))?;
        self.db().scan_began(view_end(&view.position()));
        let view = Arc::new(view);
        let mut devices = view.devices().to_vec();
        devices.retain(|d| !d.name.starts_with(INTERNAL_DEVICE_PREFIX));
        for device in devices {
            let mut after: Option<ScanCursor> = None;
            loop {
                if self.stopped() {
                    return Ok(());
                }
                let (name, limit, from) =
                    (device.name.clone(), self.config.batch_rows, after.take());
                let in_view = Arc::clone(&view);
                let page = self
                    .blocking(move |e| {
                        let (min, max) = (i64::MIN, i64::MAX);
                        e.scan_page_in(&in_view, &name, None, min, max, from.as_ref(), limit)
                    })
                    .await?
                    .map_err(|e| DbError::Fatal(format!("scanning {}: {e}", device.name)))?;
                let mut rows = Rows::default();
                for r in page.readings {
                    rows.push(r.device, r.sensor, r.ts_ns, r.value);
                }
                let n = rows.len() as u64;
                let generation = self.generation;
                self.db().write(generation, &rows, None).await?;
                roamkv_engine::crash_point("sink.snapshot_chunk");
                self.status.lock().snapshot_rows_total += n;
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        let (generation, at) = (self.generation, self.stored.clone());
        self.db()
            .write(generation, &Rows::default(), Some((&at, &at, false)))
            .await?;
        // Tailing from here on: the hold is bounded by its cap again.
        let position = self.position;
        let _ = self
            .blocking(move |e| e.feed().hold(SLOT_NAME, &position))
            .await?;
        Ok(())
    }

    /// Publishes the committed cursor (for `--on-depart cloud`).
    fn publish(&self) {
        let _ = self.cursor_tx.send(Some(self.position));
        let mut status = self.status.lock();
        status.cursor = Some(self.stored.clone());
        status.generation = self.generation;
    }

    async fn tail(&mut self) -> Result<(), DbError> {
        self.set_state("tailing", None);
        let mut ahead: Option<ReadAhead> = None;
        loop {
            if self.stopped() {
                return Ok(());
            }
            let read = self.read(ahead.take()).await?;
            match read {
                Ok(batch) if batch.records.is_empty() => {
                    if !batch.next.same_place(&self.position) {
                        // Only records that are no readings since the last commit (a sealed
                        // segment's end): everything before `next` is in the database, so the
                        // sink is caught up. Shown so (its lag, and departures waiting on it);
                        // the stored cursor moves with the next batch, and a restart reads
                        // those records again, harmlessly.
                        self.position = batch.next;
                        let _ = self.cursor_tx.send(Some(self.position));
                        self.status.lock().cursor = Some(self.position.to_string());
                    }
                    if self.pause(self.config.poll_interval).await {
                        return Ok(());
                    }
                }
                Ok(batch) => {
                    let (count, next) = cut(&batch, self.config.batch_rows);
                    // The next batch is read from the log while this one commits: the commit
                    // waits on the destination, the read on the disk and this process.
                    ahead = Some(self.read_ahead(next));
                    self.commit(batch, count, next).await?;
                }
                Err(EngineError::FeedGap { .. }) => {
                    self.after_gap().await?;
                    self.snapshot().await?;
                    self.set_state("tailing", None);
                    self.publish();
                }
                Err(EngineError::FeedDiverged { reason, .. }) => {
                    tracing::warn!(%reason, "cloud sink: the log diverged; new generation");
                    let generation = self.generation;
                    self.start_generation(generation + 1, generation).await?;
                    self.snapshot().await?;
                    self.set_state("tailing", None);
                    self.publish();
                }
                Err(e) => return Err(DbError::Fatal(format!("reading the log: {e}"))),
            }
        }
    }

    /// How many log bytes the next read asks for: `batch_rows` records at the recent bytes per
    /// record, within [64 KiB, `batch_bytes`].
    fn read_bytes(&self) -> usize {
        (self.config.batch_rows * self.bytes_per_record)
            .clamp(64 << 10, self.config.batch_bytes.max(64 << 10))
    }

    /// Starts reading the log from `from` on the blocking pool.
    fn read_ahead(&self, from: LogPos) -> ReadAhead {
        let (engine, want) = (Arc::clone(&self.engine), self.read_bytes());
        let task = tokio::task::spawn_blocking(move || engine.feed().read(&from, want));
        ReadAhead { from, task }
    }

    /// The log's records from the current position: the read made ahead when it started there
    /// and found records (an empty one is stale: records may have come since), else a new read.
    async fn read(
        &self,
        ahead: Option<ReadAhead>,
    ) -> Result<Result<FeedBatch, EngineError>, DbError> {
        if let Some(ahead) = ahead
            && ahead.from.same_place(&self.position)
            && let Ok(Ok(batch)) = ahead.task.await
            && !batch.records.is_empty()
        {
            return Ok(Ok(batch));
        }
        let (from, want) = (self.position, self.read_bytes());
        self.blocking(move |e| e.feed().read(&from, want)).await
    }

    /// One transaction for the first `count` records of `batch` (`cut`: at most `batch_rows`,
    /// at least one engine batch), ending at `next`; then the engine's hold moves.
    async fn commit(
        &mut self,
        batch: FeedBatch,
        count: usize,
        next: LogPos,
    ) -> Result<(), DbError> {
        if !batch.records.is_empty() {
            let per = batch.log_bytes as usize / batch.records.len();
            self.bytes_per_record = (self.bytes_per_record * 3 + per.max(1)) / 4;
        }
        let destination = self.db.as_ref().expect("a session runs connected");
        let rows = to_rows(&batch, count, |end, key| {
            destination.exported_by_scan([end.seq.0, end.offset], key)
        });
        let text = next.to_string();
        let (generation, from) = (self.generation, self.stored.clone());
        self.db()
            .write(generation, &rows, Some((&from, &text, false)))
            .await?;
        roamkv_engine::crash_point("sink.after_commit");
        self.position = next;
        self.stored = text;
        // A released hold is found by the next read; nothing to do about it here.
        let _ = self
            .blocking(move |e| e.feed().hold(SLOT_NAME, &next))
            .await?;
        roamkv_engine::crash_point("sink.after_hold");
        {
            let mut status = self.status.lock();
            status.rows_total += rows.len() as u64;
            status.batches_total += 1;
        }
        self.publish();
        Ok(())
    }
}

/// A read of the log begun while the previous batch commits (`Tail::read_ahead`).
struct ReadAhead {
    from: LogPos,
    task: tokio::task::JoinHandle<Result<FeedBatch, EngineError>>,
}

/// How many records of `batch` go into one transaction, and the position after them: the
/// largest prefix of whole engine batches with at most `rows_max` records (the first batch
/// always, however large).
fn cut(batch: &FeedBatch, rows_max: usize) -> (usize, LogPos) {
    let mut chosen = batch.batch_ends[0];
    for end in &batch.batch_ends {
        if end.0 > rows_max {
            break;
        }
        chosen = *end;
    }
    chosen
}

/// The rows of the first `count` records: PUTs as readings, DEPARTs with the position after
/// their batch; REGISTERs and TRIMs are not exported (the cloud keeps its own retention), nor
/// are the records of internal devices (`INTERNAL_DEVICE_PREFIX`: the server's own, such as its
/// index of event ids), nor PUTs the last scan exported (`exported(batch end, key)`).
fn to_rows(
    batch: &FeedBatch,
    count: usize,
    exported: impl Fn(&LogPos, (&str, &str, i64)) -> bool,
) -> Rows {
    let mut rows = Rows::default();
    let batch_end = |i: usize| {
        batch
            .batch_ends
            .iter()
            .find(|(n, _)| *n > i)
            .map_or(batch.next, |(_, pos)| *pos)
    };
    for (i, record) in batch.records[..count].iter().enumerate() {
        match record {
            FeedRecord::Put { device, .. } | FeedRecord::Depart { device }
                if device.starts_with(INTERNAL_DEVICE_PREFIX) => {}
            FeedRecord::Put {
                device,
                sensor,
                ts_ns,
                ..
            } if exported(&batch_end(i), (device, sensor, *ts_ns)) => {}
            FeedRecord::Put {
                device,
                sensor,
                ts_ns,
                value,
            } => rows.push(device.clone(), sensor.clone(), *ts_ns, value.clone()),
            FeedRecord::Depart { device } => {
                rows.departures
                    .push((device.clone(), batch_end(i).to_string()));
            }
            FeedRecord::Register { .. } | FeedRecord::Trim { .. } => {}
        }
    }
    rows
}

/// A read view's end (`ReadView::position`, `SEGMENT:OFFSET`) as [segment, offset].
fn view_end(position: &str) -> [u64; 2] {
    let parsed = position
        .split_once(':')
        .and_then(|(seq, offset)| Some([seq.parse().ok()?, offset.parse().ok()?]));
    parsed.expect("ReadView::position is SEGMENT:OFFSET")
}
