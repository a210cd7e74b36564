//! The load of `roamkv bench serve`: a minimal HTTP/1.1 keep-alive client (one connection per
//! client thread, so the load generator costs little CPU next to the server on the same
//! machine), the request bodies of each system for the same readings, and the two drivers —
//! closed loop (each client sends its next event when the last one is answered: the peak rate)
//! and open loop (events sent on a fixed schedule at a given rate, latency measured from the
//! scheduled time, so a server that falls behind shows it as latency: no coordinated omission).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::{BenchError, Result};

/// The readings of one event: `readings` of them, all of device `dev-{client}` at one origin.
#[derive(Debug, Clone, Copy)]
pub struct EventSpec {
    pub client: usize,
    pub seq: u64,
    pub readings: usize,
    /// The event's origin, ms since the epoch (unique per client and sequence number).
    pub origin_ms: i64,
}

impl EventSpec {
    pub fn device(&self) -> String {
        device_name(self.client)
    }
    fn origin_ns(&self) -> i64 {
        self.origin_ms * 1_000_000
    }
    /// A value that changes with the event (21.5 .. 121.4).
    fn value(&self, i: usize) -> String {
        format!(
            "{:.1}",
            21.5 + ((self.seq as usize + i) % 1000) as f64 / 10.0
        )
    }
}

pub fn device_name(client: usize) -> String {
    format!("dev-{client}")
}

pub fn resource_name(i: usize) -> String {
    format!("sensor-{i}")
}

/// A UUID-shaped id (version 4 and variant nibbles set) unique per (client, counter).
fn id(client: usize, kind: u16, counter: u64) -> String {
    format!(
        "{:08x}-{kind:04x}-4000-8000-{:012x}",
        client as u32,
        counter & 0xffff_ffff_ffff
    )
}

pub const PROFILE: &str = "bench-profile";
pub const SOURCE: &str = "bench-source";

/// An EdgeX v3 AddEventRequest, as EdgeX device services send it (JSON).
pub fn edgex_json(e: &EventSpec) -> String {
    let device = e.device();
    let origin = e.origin_ns();
    let mut out = String::with_capacity(200 + e.readings * 240);
    let _ = write!(
        out,
        r#"{{"apiVersion":"v3","event":{{"apiVersion":"v3","id":"{}","deviceName":"{device}","profileName":"{PROFILE}","sourceName":"{SOURCE}","origin":{origin},"readings":["#,
        id(e.client, 1, e.seq)
    );
    for i in 0..e.readings {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            r#"{{"id":"{}","origin":{origin},"deviceName":"{device}","resourceName":"{}","profileName":"{PROFILE}","valueType":"Float64","units":"C","value":"{}"}}"#,
            id(e.client, 2, e.seq * 1000 + i as u64),
            resource_name(i),
            e.value(i)
        );
    }
    out.push_str("]}}");
    out
}

/// The same readings in InfluxDB's line protocol: one point per reading, device, resource,
/// profile and source as tags, the value and what EdgeX keeps with it (value type, units,
/// reading and event ids) as fields, the origin in ns.
pub fn influx_lines(e: &EventSpec) -> String {
    let device = e.device();
    let origin = e.origin_ns();
    let event_id = id(e.client, 1, e.seq);
    let mut out = String::with_capacity(e.readings * 220);
    for i in 0..e.readings {
        let _ = writeln!(
            out,
            r#"edgex,device={device},resource={},profile={PROFILE},source={SOURCE} value={},valueType="Float64",units="C",id="{}",event="{event_id}" {origin}"#,
            resource_name(i),
            e.value(i),
            id(e.client, 2, e.seq * 1000 + i as u64),
        );
    }
    out
}

/// One answered request: status and body.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// An HTTP/1.1 client on one keep-alive connection (reconnects when the server closes it).
pub struct HttpClient {
    addr: SocketAddr,
    conn: Option<(TcpStream, BufReader<TcpStream>)>,
    head: String,
}

impl HttpClient {
    pub fn new(addr: SocketAddr) -> HttpClient {
        HttpClient {
            addr,
            conn: None,
            head: String::with_capacity(256),
        }
    }

    fn connect(&mut self) -> std::io::Result<&mut (TcpStream, BufReader<TcpStream>)> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(self.addr)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(120)))?;
            let reader = BufReader::with_capacity(64 * 1024, stream.try_clone()?);
            self.conn = Some((stream, reader));
        }
        Ok(self.conn.as_mut().expect("connected just above"))
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Answer> {
        let outcome = self.try_request(method, path, content_type, body);
        if outcome.is_err() {
            self.conn = None;
        }
        outcome.map_err(|source| BenchError::Http {
            request: format!("{method} {path} to {}", self.addr),
            source,
        })
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<Answer> {
        self.head.clear();
        let _ = write!(
            self.head,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        let head = std::mem::take(&mut self.head);
        let (stream, reader) = self.connect()?;
        let written = stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body));
        let answer = written.and_then(|()| read_response(reader));
        self.head = head;
        let (answer, keep_alive) = answer?;
        if !keep_alive {
            self.conn = None;
        }
        Ok(answer)
    }
}

/// The value of `name` (a metric without labels) in a roamkv server's /metrics; None when the
/// server does not report it.
pub fn scrape_metric(addr: SocketAddr, name: &str) -> Result<Option<f64>> {
    let answer = HttpClient::new(addr).request("GET", "/metrics", "text/plain", b"")?;
    let text = String::from_utf8_lossy(&answer.body);
    let Some(value) = text
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
    else {
        return Ok(None);
    };
    value
        .trim()
        .parse()
        .map(Some)
        .map_err(|e| BenchError::Run(format!("{name} {value:?} in /metrics: {e}")))
}

fn bad_data(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// Reads one response: status line, headers, and a Content-Length or chunked body. Returns
/// the answer and whether the connection stays open.
fn read_response(reader: &mut BufReader<TcpStream>) -> std::io::Result<(Answer, bool)> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(bad_data("the server closed the connection".into()));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad_data(format!("bad status line {line:?}")))?;
    let (mut length, mut chunked, mut keep_alive) = (0usize, false, true);
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                length = value
                    .parse()
                    .map_err(|_| bad_data(format!("bad Content-Length {value:?}")))?
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(reader, &mut line)?
    } else {
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok((Answer { status, body }, keep_alive))
}

fn read_chunked(reader: &mut BufReader<TcpStream>, line: &mut String) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        line.clear();
        reader.read_line(line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| bad_data(format!("bad chunk size {line:?}")))?;
        if size == 0 {
            // Trailers (none expected) up to the empty line.
            loop {
                line.clear();
                reader.read_line(line)?;
                if line.trim_end().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        line.clear();
        reader.read_line(line)?;
    }
}

/// One client of a system under test: sends one event's readings, returns when it is acked.
pub trait Sender: Send {
    fn send(&mut self, event: &EventSpec) -> Result<()>;
}

/// When a run's clients send.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Each client sends its next event as soon as the last one is answered.
    ClosedLoop,
    /// Events at this many readings per second over all clients, on a fixed schedule.
    OpenLoop { readings_per_sec: f64 },
}

/// What the clients of one run did.
pub struct LoadOutcome {
    /// Latency of requests started in the measured window, in µs.
    pub latency_us: Histogram<u64>,
    /// Readings acked in the measured window.
    pub measured_readings: u64,
    pub measured_events: u64,
    /// Readings acked in the whole run (warm-up included): what the store must hold.
    pub acked_readings: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub measured_s: f64,
}

/// Runs `clients` threads, each with its own sender, for `warmup` + `measured`.
pub fn drive(
    senders: Vec<Box<dyn Sender>>,
    readings_per_event: usize,
    pace: Pace,
    warmup: Duration,
    measured: Duration,
    base_ms: i64,
) -> LoadOutcome {
    let clients = senders.len();
    let start = Instant::now() + Duration::from_millis(50);
    let window = (start + warmup, start + warmup + measured);
    let outcomes: Vec<ClientOutcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = senders
            .into_iter()
            .enumerate()
            .map(|(client, sender)| {
                let plan = ClientPlan {
                    client,
                    clients,
                    readings_per_event,
                    pace,
                    start,
                    window,
                    base_ms,
                };
                scope.spawn(move || run_client(sender, plan))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a load client panicked"))
            .collect()
    });
    merge(outcomes, measured).with_readings_per_event(readings_per_event)
}

struct ClientPlan {
    client: usize,
    clients: usize,
    readings_per_event: usize,
    pace: Pace,
    start: Instant,
    /// The measured window: requests that start inside it count.
    window: (Instant, Instant),
    base_ms: i64,
}

struct ClientOutcome {
    latency_us: Histogram<u64>,
    measured_events: u64,
    acked_events: u64,
    errors: u64,
    first_error: Option<String>,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

fn run_client(mut sender: Box<dyn Sender>, plan: ClientPlan) -> ClientOutcome {
    let mut out = ClientOutcome {
        latency_us: new_histogram(),
        measured_events: 0,
        acked_events: 0,
        errors: 0,
        first_error: None,
    };
    // Open loop: this client's share of the rate, its sends spread over the interval.
    let interval = match plan.pace {
        Pace::ClosedLoop => None,
        Pace::OpenLoop { readings_per_sec } => Some(Duration::from_secs_f64(
            plan.clients as f64 * plan.readings_per_event as f64 / readings_per_sec.max(1e-9),
        )),
    };
    let offset = interval.map_or(Duration::ZERO, |i| {
        i.mul_f64(plan.client as f64 / plan.clients as f64)
    });
    let now = Instant::now();
    if plan.start > now {
        std::thread::sleep(plan.start - now);
    }
    for seq in 0u64.. {
        let scheduled = match interval {
            Some(i) => plan.start + offset + i.mul_f64(seq as f64),
            None => Instant::now(),
        };
        if scheduled >= plan.window.1 {
            break;
        }
        let now = Instant::now();
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        let event = EventSpec {
            client: plan.client,
            seq,
            readings: plan.readings_per_event,
            origin_ms: plan.base_ms + seq as i64,
        };
        let sent = sender.send(&event);
        let latency = scheduled.elapsed();
        match sent {
            Ok(()) => {
                out.acked_events += 1;
                if scheduled >= plan.window.0 {
                    out.measured_events += 1;
                    let _ = out.latency_us.record((latency.as_micros() as u64).max(1));
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
                if out.errors > 100 && out.acked_events == 0 {
                    break; // the target is down: do not spin
                }
            }
        }
    }
    out
}

fn merge(outcomes: Vec<ClientOutcome>, measured: Duration) -> LoadOutcome {
    let mut latency_us = new_histogram();
    let (mut measured_events, mut acked_events, mut errors, mut first_error) = (0, 0, 0, None);
    for o in outcomes {
        let _ = latency_us.add(&o.latency_us);
        measured_events += o.measured_events;
        acked_events += o.acked_events;
        errors += o.errors;
        if first_error.is_none() {
            first_error = o.first_error;
        }
    }
    LoadOutcome {
        latency_us,
        measured_events,
        measured_readings: 0,
        acked_readings: acked_events,
        errors,
        first_error,
        measured_s: measured.as_secs_f64(),
    }
}

impl LoadOutcome {
    /// Converts event counts into readings (every event of a run has the same size).
    fn with_readings_per_event(mut self, readings_per_event: usize) -> LoadOutcome {
        self.measured_readings = self.measured_events * readings_per_event as u64;
        self.acked_readings *= readings_per_event as u64;
        self
    }

    pub fn readings_per_sec(&self) -> f64 {
        self.measured_readings as f64 / self.measured_s
    }

    pub fn percentile_ms(&self, p: f64) -> f64 {
        self.latency_us.value_at_quantile(p) as f64 / 1000.0
    }
}

/// Builds something of a request (its path, its body) from the event it carries.
pub type PerEvent<T> = Arc<dyn Fn(&EventSpec) -> T + Send + Sync>;

/// A sender that POSTs a body built per event (roamkv's EdgeX route, its native binary route,
/// InfluxDB's /write).
pub struct HttpSender {
    pub client: HttpClient,
    pub content_type: &'static str,
    pub path: PerEvent<String>,
    pub body: PerEvent<Vec<u8>>,
}

impl Sender for HttpSender {
    fn send(&mut self, event: &EventSpec) -> Result<()> {
        let body = (self.body)(event);
        let path = (self.path)(event);
        let answer = self
            .client
            .request("POST", &path, self.content_type, &body)?;
        if (200..300).contains(&answer.status) {
            Ok(())
        } else {
            Err(BenchError::HttpStatus {
                request: format!("POST {path}"),
                status: answer.status,
                body: String::from_utf8_lossy(&answer.body).into_owned(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_the_same_readings() {
        let e = EventSpec {
            client: 3,
            seq: 7,
            readings: 2,
            origin_ms: 1_700_000_000_000,
        };
        let json: serde_json::Value = serde_json::from_str(&edgex_json(&e)).expect("JSON");
        let readings = json["event"]["readings"].as_array().expect("readings");
        assert_eq!(readings.len(), 2);
        assert_eq!(readings[1]["resourceName"], "sensor-1");
        assert_eq!(readings[1]["origin"], 1_700_000_000_000_000_000i64);
        assert_eq!(json["event"]["deviceName"], "dev-3");
        let lines = influx_lines(&e);
        assert_eq!(lines.lines().count(), 2);
        assert!(lines.contains("device=dev-3,resource=sensor-1,"), "{lines}");
        assert!(
            lines.trim_end().ends_with(" 1700000000000000000"),
            "{lines}"
        );
        let id = id(3, 2, 7001);
        assert!(uuid_shaped(&id), "{id}");
    }

    fn uuid_shaped(s: &str) -> bool {
        let parts: Vec<usize> = s.split('-').map(str::len).collect();
        parts == [8, 4, 4, 4, 12] && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
    }
}
