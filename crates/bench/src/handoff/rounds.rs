//! The fault rounds of `roamkv bench handoff`: in each, a fleet of new devices is written at one
//! edge, handed to the other and back (A -> B -> A, or B -> A -> B) while their writers go on
//! writing, and during each move one fault drawn from the round's seed strikes: kill -9 of A, of
//! B or of PostgreSQL's postmaster (the victim started again after a random downtime), or a cut
//! of A's, B's or the cloud's link of random length, or none. At the end of each round, with the
//! writers stopped and both edges' sinks caught up, every holder is checked against the ledger
//! (ledger.rs): the owner edge and the cloud hold every acknowledged reading with its value
//! (**lost**) and nothing nobody sent or that was refused (**phantom**); the other edge holds
//! none of the fleet's readings and no scan answers a key twice (**visible duplicates**); no
//! edge began its DEPART before the receiver's commit (**early departs**, from the two
//! records). Sends beyond the first of a row to the cloud are counted (**redeliveries**: by
//! design every edge whose log holds a reading sends it, so a reading that went A -> B -> A is
//! sent by each edge it passed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use roamkv_testbed::postgres::Cluster;

use super::edge::NetEdge;
use super::ledger::{DeviceLedger, Outcome, Verdict, WriterSpec};
use super::net::{Net, Node};
use crate::error::{BenchError, Result};

/// A move's handoffs not all done after this: the round fails (a handoff is stuck).
const MOVE_WITHIN: Duration = Duration::from_secs(180);
/// Both sinks at lag 0 within this after the writers stop, or the round fails.
const SINK_CATCH_UP_WITHIN: Duration = Duration::from_secs(120);
/// Devices of each round's fleet.
pub const FLEET: usize = 4;
/// What the sender's poll waits between looks at its records.
const POLL: Duration = Duration::from_millis(10);

/// What strikes during a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Fault {
    None,
    KillA,
    KillB,
    KillPostgres,
    CutA,
    CutB,
    CutCloud,
}

impl Fault {
    pub const ALL: [Fault; 7] = [
        Fault::None,
        Fault::KillA,
        Fault::KillB,
        Fault::KillPostgres,
        Fault::CutA,
        Fault::CutB,
        Fault::CutCloud,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::KillA => "kill -9 A",
            Fault::KillB => "kill -9 B",
            Fault::KillPostgres => "kill -9 postmaster",
            Fault::CutA => "cut A's link",
            Fault::CutB => "cut B's link",
            Fault::CutCloud => "cut the cloud's link",
        }
    }
}

/// A move's fault, as drawn and as it went.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FaultRecord {
    pub fault: Fault,
    /// When it struck, from the move's first handoff request.
    pub at_ms: u64,
    /// The victim's downtime (kills: from the kill to the restart's start) or the cut's length.
    pub length_ms: u64,
    /// Handoffs of the move not yet done when it struck.
    pub pending_when_struck: usize,
    /// Kills of A or B with handoffs pending: from the restarted edge's /ready to the first
    /// progress of a pending handoff (its record's state or chunk count changed).
    pub resume_ms: Option<f64>,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RoundResult {
    pub round: usize,
    /// "A" or "B": where the fleet starts and ends.
    pub origin: &'static str,
    /// Seconds from the first round's start.
    pub started_s: f64,
    pub seconds: f64,
    pub faults: Vec<FaultRecord>,
    /// Each handoff's time from its record's start to its `done`, by the sender's clock, ms.
    pub handoff_ms: Vec<f64>,
    pub acked: u64,
    pub refused: u64,
    pub unknown: u64,
    /// Requests by answer: HTTP status, 0 no connection, 1 no answer.
    pub answers: BTreeMap<u16, u64>,
    pub edge: Verdict,
    pub cloud: Verdict,
    pub duplicates: u64,
    pub early_departs: u64,
    pub redeliveries: u64,
}

impl RoundResult {
    /// The times of the handoffs of the moves `fault` struck (`handoff_ms` holds each move's
    /// `FLEET` handoffs, in move order).
    pub fn handoff_ms_under(&self, fault: Fault) -> impl Iterator<Item = f64> + '_ {
        self.faults
            .iter()
            .enumerate()
            .filter(move |(_, f)| f.fault == fault)
            .flat_map(move |(i, _)| self.handoff_ms.iter().skip(i * FLEET).take(FLEET).copied())
    }

    /// The four counts that must be 0.
    pub fn failures(&self) -> u64 {
        self.edge.lost
            + self.cloud.lost
            + self.edge.phantom
            + self.cloud.phantom
            + self.duplicates
            + self.early_departs
    }
}

/// What the rounds run against.
pub struct Rig<'a> {
    pub net: &'a Net,
    pub edges: [NetEdge; 2],
    pub pg: Cluster,
    /// Each edge's URL through the relay (what the other edge hands to).
    pub via: [String; 2],
    pub writer: WriterSpec,
}

/// A device of the round's fleet: its name, which edge its writer writes to.
struct Member {
    name: String,
    owner: Arc<AtomicUsize>,
}

/// One handoff of a move.
struct Moving {
    member: usize,
    id: String,
    took_ms: Option<f64>,
}

/// Runs round `round` (its draws from `rng`).
pub fn round(
    rig: &mut Rig,
    round: usize,
    rng: &mut impl Rng,
    epoch: Instant,
) -> Result<RoundResult> {
    let started = Instant::now();
    let origin = round % 2;
    let kinds = ["car", "drone", "phone", "truck"];
    let fleet: Vec<Member> = (0..FLEET)
        .map(|i| Member {
            name: format!("r{round}-{}-{i}", kinds[i % kinds.len()]),
            owner: Arc::new(AtomicUsize::new(origin)),
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = fleet
        .iter()
        .map(|m| {
            let (name, owner, spec, stop) = (
                m.name.clone(),
                Arc::clone(&m.owner),
                rig.writer.clone(),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || super::ledger::write_until(name, owner, spec, stop))
        })
        .collect();
    let mut result = RoundResult {
        round,
        origin: ["A", "B"][origin],
        started_s: started.duration_since(epoch).as_secs_f64(),
        ..RoundResult::default()
    };
    // The fleet exists at its origin before it moves.
    std::thread::sleep(Duration::from_millis(300));
    let mut handoffs = Vec::new();
    for from in [origin, 1 - origin] {
        let fault = draw_fault(rng);
        let (moved, record) = move_fleet(rig, &fleet, from, fault)?;
        result.faults.push(record);
        result
            .handoff_ms
            .extend(moved.iter().filter_map(|m| m.took_ms));
        handoffs.extend(moved.into_iter().map(|m| (from, m.id)));
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let ledgers: Vec<DeviceLedger> = writers
        .into_iter()
        .map(|w| {
            w.join()
                .map_err(|_| BenchError::Run("a writer panicked".into()))
        })
        .collect::<Result<_>>()?;
    wait_for_sinks(rig)?;
    check(rig, round, origin, &ledgers, &handoffs, &mut result)?;
    result.seconds = started.elapsed().as_secs_f64();
    Ok(result)
}

/// A fault for a move: its kind, when it strikes (0-400 ms from the first request: handoffs of
/// these fleets take ~100-300 ms, so some strike mid-handoff and some after), how long.
fn draw_fault(rng: &mut impl Rng) -> FaultRecord {
    let fault = Fault::ALL[rng.random_range(0..Fault::ALL.len())];
    let length_ms = match fault {
        Fault::CutA | Fault::CutB | Fault::CutCloud => rng.random_range(100..=3_000),
        _ => rng.random_range(0..=1_000),
    };
    FaultRecord {
        fault,
        at_ms: rng.random_range(0..=400),
        length_ms,
        pending_when_struck: 0,
        resume_ms: None,
    }
}

/// Where a fault is in its course.
enum Course {
    Waiting,
    Striking {
        until: Instant,
    },
    /// A killed edge is back: (when it was ready, its pending handoffs' (state, chunks) before).
    Resuming {
        ready: Instant,
        before: Vec<(String, u64)>,
    },
    Over,
}

/// Hands every member from edge `from` to the other, with `fault` striking meanwhile; waits
/// until every handoff is done and the fault is over. Writers move when their handoff is done.
fn move_fleet(
    rig: &mut Rig,
    fleet: &[Member],
    from: usize,
    mut fault: FaultRecord,
) -> Result<(Vec<Moving>, FaultRecord)> {
    let to = 1 - from;
    let started = Instant::now();
    let mut moving = Vec::new();
    for (i, m) in fleet.iter().enumerate() {
        moving.push(Moving {
            member: i,
            id: start_handoff(&rig.edges[from], &m.name, &rig.via[to])?,
            took_ms: None,
        });
    }
    let mut course = Course::Waiting;
    let mut before = Vec::new();
    loop {
        let now = Instant::now();
        course = match course {
            Course::Waiting if now >= started + Duration::from_millis(fault.at_ms) => {
                // As the sender's records say (our poll of them may lag).
                before = progress(&rig.edges[from], &moving).unwrap_or_default();
                fault.pending_when_struck = before.iter().filter(|(s, _)| s != "done").count();
                strike(rig, fault.fault)?;
                Course::Striking {
                    until: now + Duration::from_millis(fault.length_ms),
                }
            }
            Course::Striking { until } if now >= until => match recover(rig, fault.fault)? {
                Some(ready) if fault.pending_when_struck > 0 => Course::Resuming {
                    ready,
                    before: std::mem::take(&mut before),
                },
                _ => Course::Over,
            },
            Course::Resuming { ready, before } => {
                if progress(&rig.edges[from], &moving).is_some_and(|now| now != before) {
                    fault.resume_ms = Some(ready.elapsed().as_secs_f64() * 1e3);
                    Course::Over
                } else {
                    Course::Resuming { ready, before }
                }
            }
            other => other,
        };
        if rig.edges[from].is_running() {
            note_done(&rig.edges[from], &mut moving, fleet, to);
        }
        if matches!(course, Course::Over) && moving.iter().all(|m| m.took_ms.is_some()) {
            return Ok((moving, fault));
        }
        if started.elapsed() > MOVE_WITHIN {
            let records: Vec<String> = moving
                .iter()
                .map(|m| format!("{}", rig.edges[from].record(&m.id).unwrap_or_default()))
                .collect();
            return Err(BenchError::Check(format!(
                "handoffs from edge {} not done within {} s ({}): {}",
                ["A", "B"][from],
                MOVE_WITHIN.as_secs(),
                fault.fault.name(),
                records.join("; ")
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Looks at the sender's records of the handoffs not yet seen done; a member whose handoff is
/// done writes to `to` from now on.
fn note_done(sender: &NetEdge, moving: &mut [Moving], fleet: &[Member], to: usize) {
    for m in moving.iter_mut().filter(|m| m.took_ms.is_none()) {
        if let Ok(record) = sender.glance_at_record(&m.id)
            && record["state"] == "done"
        {
            // The sender's own times: our looks may have waited on a cut link.
            let took = record["finished_ms"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(record["started_ms"].as_u64().unwrap_or(0));
            m.took_ms = Some(took as f64);
            fleet[m.member].owner.store(to, Ordering::Relaxed);
        }
    }
}

/// The handoff's request, repeated while the sender refuses it for a reason that passes (the
/// device's first write not yet acknowledged; a moment of unreachability).
fn start_handoff(from: &NetEdge, device: &str, to_via: &str) -> Result<String> {
    let started = Instant::now();
    loop {
        match from.hand(device, to_via) {
            Ok(id) => return Ok(id),
            Err(e) if started.elapsed() > Duration::from_secs(30) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Each handoff's (state, chunks) at the sender; None if one cannot be read (down, cut).
fn progress(sender: &NetEdge, moving: &[Moving]) -> Option<Vec<(String, u64)>> {
    moving
        .iter()
        .map(|m| {
            let r = sender.glance_at_record(&m.id).ok()?;
            Some((
                r["state"].as_str().unwrap_or_default().to_string(),
                r["chunks"].as_u64().unwrap_or(0),
            ))
        })
        .collect()
}

fn strike(rig: &mut Rig, fault: Fault) -> Result<()> {
    match fault {
        Fault::None => Ok(()),
        Fault::KillA | Fault::KillB => {
            rig.edges[usize::from(fault == Fault::KillB)].kill();
            Ok(())
        }
        Fault::KillPostgres => Ok(rig.pg.kill_postmaster()?),
        Fault::CutA => rig.net.cut(Node::A),
        Fault::CutB => rig.net.cut(Node::B),
        Fault::CutCloud => rig.net.cut(Node::Cloud),
    }
}

/// Ends the fault; for a killed edge, when it answered /ready again.
fn recover(rig: &mut Rig, fault: Fault) -> Result<Option<Instant>> {
    match fault {
        Fault::None => Ok(None),
        Fault::KillA => rig.edges[0].spawn().map(Some),
        Fault::KillB => rig.edges[1].spawn().map(Some),
        Fault::KillPostgres => {
            rig.pg.restart()?;
            Ok(None)
        }
        Fault::CutA => rig.net.heal(Node::A).map(|()| None),
        Fault::CutB => rig.net.heal(Node::B).map(|()| None),
        Fault::CutCloud => rig.net.heal(Node::Cloud).map(|()| None),
    }
}

/// Waits until both edges' sinks are tailing with nothing left behind.
fn wait_for_sinks(rig: &Rig) -> Result<()> {
    let started = Instant::now();
    for edge in &rig.edges {
        loop {
            let view = edge
                .call("GET", "/sink", None)
                .map(|(_, v)| v)
                .unwrap_or_default();
            if view["lag_bytes"] == 0 && view["sink"]["state"] == "tailing" {
                break;
            }
            if started.elapsed() > SINK_CATCH_UP_WITHIN {
                return Err(BenchError::Check(format!(
                    "edge {}'s sink not caught up within {} s: {view}",
                    edge.node.name(),
                    SINK_CATCH_UP_WITHIN.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The end-of-round checks: each holder against the ledgers, and the handoffs' records.
fn check(
    rig: &Rig,
    round: usize,
    origin: usize,
    ledgers: &[DeviceLedger],
    handoffs: &[(usize, String)],
    r: &mut RoundResult,
) -> Result<()> {
    let cloud = cloud_readings(&rig.pg, round)?;
    let empty = BTreeMap::new();
    for l in ledgers {
        r.acked += l.count(Outcome::Acked);
        r.refused += l.count(Outcome::Refused);
        r.unknown += l.count(Outcome::Unknown);
        for (status, n) in &l.answers {
            *r.answers.entry(*status).or_default() += n;
        }
        let value_bytes = rig.writer.value_bytes;
        let (held, repeated) = rig.edges[origin].readings(&l.device)?;
        add(&mut r.edge, l.verdict(&held, value_bytes));
        let (elsewhere, repeated_elsewhere) = rig.edges[1 - origin].readings(&l.device)?;
        r.duplicates += repeated + repeated_elsewhere + elsewhere.len() as u64;
        add(
            &mut r.cloud,
            l.verdict(cloud.get(&l.device).unwrap_or(&empty), value_bytes),
        );
    }
    let prefix = format!("r{round}-%");
    let counts = rig.pg.psql(&[
        "-c",
        &format!(
            "SELECT count(*) - count(DISTINCT (device, sensor, ts_ns)), \
             (SELECT coalesce(sum(n), 0) - count(*) FROM sends WHERE device LIKE '{prefix}') \
             FROM roamkv_readings WHERE device LIKE '{prefix}'"
        ),
    ])?;
    let mut counts = counts
        .trim()
        .split('|')
        .map(|v| v.parse::<u64>().unwrap_or(u64::MAX));
    r.duplicates += counts.next().unwrap_or(u64::MAX);
    r.redeliveries = counts.next().unwrap_or(u64::MAX);
    for (from, id) in handoffs {
        let sent = rig.edges[*from].record(id)?;
        let received = rig.edges[1 - *from].record(id)?;
        let (departed, committed) = (
            sent["departed_ms"].as_u64(),
            received["committed_ms"].as_u64(),
        );
        let in_order = received["committed"] == true
            && matches!((departed, committed), (Some(d), Some(c)) if d >= c);
        if !in_order {
            eprintln!(
                "round {round}: handoff {id}: departed {departed:?}, receiver committed {committed:?}"
            );
            r.early_departs += 1;
        }
    }
    Ok(())
}

fn add(total: &mut Verdict, v: Verdict) {
    total.lost += v.lost;
    total.phantom += v.phantom;
}

/// The cloud's readings of the round's fleet: device -> (ts -> value).
fn cloud_readings(pg: &Cluster, round: usize) -> Result<BTreeMap<String, BTreeMap<i64, String>>> {
    let rows = pg.psql(&[
        "-c",
        &format!(
            "SELECT device, ts_ns, convert_from(value, 'UTF8') FROM roamkv_readings \
             WHERE device LIKE 'r{round}-%' AND sensor = '{}'",
            super::ledger::SENSOR
        ),
    ])?;
    let mut out: BTreeMap<String, BTreeMap<i64, String>> = BTreeMap::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, '|');
        let (Some(device), Some(ts), Some(value)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(BenchError::Run(format!(
                "a cloud row I cannot read: {line}"
            )));
        };
        let ts = ts
            .parse()
            .map_err(|_| BenchError::Run(format!("a cloud row's ts: {line}")))?;
        out.entry(device.to_string())
            .or_default()
            .insert(ts, value.to_string());
    }
    Ok(out)
}
