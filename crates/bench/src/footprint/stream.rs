//! The seeded sensor stream of `roamkv bench footprint`: D devices x S sensors at 1 Hz, as an
//! EdgeX device service sends it — one event per device and second carrying every sensor's
//! reading, a random UUID v4 for each event and each reading, and values in EdgeX's text forms.
//!
//! Why it looks like this: what a store keeps per reading depends on how much its bytes repeat.
//! A counter of 0,1,2,... or a value of 21.5 forever compresses to nothing and flatters every
//! store; random UUIDs and drifting floats do not. So the mix is what a gateway sees: Float64
//! values that random-walk at a sensor's resolution (printed `%e`-style, "2.153000e+01", as the
//! issue measured), Int64 counters that grow by 0..3 a second, a Bool that flips now and then, a
//! String state that changes rarely, and a constant.
//!
//! Deterministic: the same seed gives the same events, UUIDs and values, so every reader of the
//! stream (each client thread, the read-back check) regenerates it instead of storing it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The kind of one sensor slot (`--mix`, cycled over the sensors of a device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Float64, a random walk at 0.01 resolution, `%e` text.
    Float,
    /// Int64, grows by 0..3 each second.
    Counter,
    /// Bool, flips with probability 1/60 each second.
    Bool,
    /// String, one of a few states, changes with probability 1/300 each second.
    State,
    /// Int64, the same value forever.
    Constant,
}

impl Kind {
    pub fn value_type(self) -> &'static str {
        match self {
            Kind::Float => "Float64",
            Kind::Counter | Kind::Constant => "Int64",
            Kind::Bool => "Bool",
            Kind::State => "String",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Kind::Float => "temperature",
            Kind::Counter => "pulses",
            Kind::Bool => "door-open",
            Kind::State => "state",
            Kind::Constant => "setpoint",
        }
    }
}

/// The default mix of a device's ten sensors: six floats, a counter, a bool, a state, a constant.
pub const MIX_DEFAULT: [Kind; 10] = [
    Kind::Float,
    Kind::Float,
    Kind::Float,
    Kind::Float,
    Kind::Float,
    Kind::Float,
    Kind::Counter,
    Kind::Bool,
    Kind::State,
    Kind::Constant,
];

const STATES: [&str; 4] = ["idle", "running", "maintenance", "fault"];

/// The stream's shape; `readings()` = devices x sensors x the seconds sent.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StreamSpec {
    pub devices: usize,
    pub sensors: usize,
    pub seconds: u64,
    pub seed: u64,
    pub mix: Vec<Kind>,
    /// The seconds before it are generated (the stream is the same from there on) but not
    /// sent: the second half of a stream whose first half went in as a warm-up.
    pub send_from_second: u64,
}

/// The first event's origin (fixed, so every run writes the same keys): 2023-11-14T22:13:20Z.
pub const START_MS: i64 = 1_700_000_000_000;
pub const PROFILE: &str = "footprint-profile";
pub const SOURCE: &str = "footprint-source";

impl StreamSpec {
    pub fn readings(&self) -> u64 {
        (self.devices * self.sensors) as u64 * self.seconds.saturating_sub(self.send_from_second)
    }
    pub fn kind(&self, sensor: usize) -> Kind {
        self.mix[sensor % self.mix.len()]
    }
    pub fn device_name(&self, device: usize) -> String {
        format!("gw-device-{device:04}")
    }
    pub fn sensor_name(&self, sensor: usize) -> String {
        format!("{}-{sensor}", self.kind(sensor).word())
    }
    pub fn events(&self) -> Stream {
        Stream::new(self.clone())
    }
}

/// One reading of an event.
#[derive(Debug, Clone)]
pub struct Reading {
    pub sensor: usize,
    pub id: String,
    pub value: String,
}

/// One device's readings of one second.
#[derive(Debug, Clone)]
pub struct Event {
    pub device: usize,
    pub second: u64,
    pub id: String,
    pub readings: Vec<Reading>,
}

impl Event {
    pub fn origin_ns(&self) -> i64 {
        (START_MS + self.second as i64 * 1000) * 1_000_000
    }
}

/// The events in time order (second by second, device by device within a second).
pub struct Stream {
    spec: StreamSpec,
    rng: StdRng,
    /// Per (device, sensor): a float's level, a counter's count, a bool or a state's index.
    level: Vec<f64>,
    next: (u64, usize),
}

impl Stream {
    fn new(spec: StreamSpec) -> Stream {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let level = (0..spec.devices * spec.sensors)
            .map(|slot| match spec.kind(slot % spec.sensors) {
                Kind::Float => (rng.random_range(1000..9000) as f64) / 100.0,
                Kind::Counter => rng.random_range(0..1_000_000) as f64,
                Kind::Constant => 230.0,
                Kind::Bool | Kind::State => 0.0,
            })
            .collect();
        Stream {
            spec,
            rng,
            level,
            next: (0, 0),
        }
    }

    /// The next value of a slot: its level moved one second on, in EdgeX's text form.
    fn step(&mut self, slot: usize, kind: Kind) -> String {
        let rng = &mut self.rng;
        let level = &mut self.level[slot];
        match kind {
            Kind::Float => {
                // A walk in steps of the sensor's resolution (0.01), so levels stay exact.
                let cents = (*level * 100.0).round() + rng.random_range(-3..=3) as f64;
                *level = cents / 100.0;
                percent_e(*level)
            }
            Kind::Counter => {
                *level += rng.random_range(0..=3) as f64;
                format!("{}", *level as i64)
            }
            Kind::Bool => {
                if rng.random_range(0..60) == 0 {
                    *level = 1.0 - *level;
                }
                (if *level > 0.5 { "true" } else { "false" }).to_string()
            }
            Kind::State => {
                if rng.random_range(0..300) == 0 {
                    *level = rng.random_range(0..STATES.len()) as f64;
                }
                STATES[*level as usize].to_string()
            }
            Kind::Constant => format!("{}", *level as i64),
        }
    }
}

impl Iterator for Stream {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            let event = self.generate()?;
            if event.second >= self.spec.send_from_second {
                return Some(event);
            }
        }
    }
}

impl Stream {
    /// The next event of the whole stream, sent or not (the values walk on either way).
    fn generate(&mut self) -> Option<Event> {
        let (second, device) = self.next;
        if second >= self.spec.seconds || self.spec.devices == 0 {
            return None;
        }
        self.next = if device + 1 == self.spec.devices {
            (second + 1, 0)
        } else {
            (second, device + 1)
        };
        let id = uuid_v4(&mut self.rng);
        let readings = (0..self.spec.sensors)
            .map(|sensor| {
                let kind = self.spec.kind(sensor);
                let value = self.step(device * self.spec.sensors + sensor, kind);
                Reading {
                    sensor,
                    id: uuid_v4(&mut self.rng),
                    value,
                }
            })
            .collect();
        Some(Event {
            device,
            second,
            id,
            readings,
        })
    }
}

/// A random UUID version 4 (RFC 9562: version nibble 4, variant bits 10) from the seeded rng.
fn uuid_v4(rng: &mut StdRng) -> String {
    let mut b: [u8; 16] = rng.random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// C's `%e` (six digits, a signed two-digit exponent), as EdgeX device services print Float64s.
pub fn percent_e(v: f64) -> String {
    let rust = format!("{v:.6e}"); // "2.150000e1"
    let (mantissa, exponent) = rust.split_once('e').expect("{:e} always has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e}'s exponent is an integer");
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> StreamSpec {
        StreamSpec {
            devices: 3,
            sensors: 10,
            seconds: 4,
            seed: 7,
            mix: MIX_DEFAULT.to_vec(),
            send_from_second: 0,
        }
    }

    /// A warm-up's two halves: the first half is the stream of half the seconds, the second
    /// the rest of the whole, the values walking on from where the first left them.
    #[test]
    fn a_stream_in_two_halves_is_the_whole_stream() {
        let whole = StreamSpec {
            seconds: 8,
            ..spec()
        };
        let second_half = StreamSpec {
            send_from_second: 4,
            ..whole.clone()
        };
        let halves: Vec<Event> = spec().events().chain(second_half.events()).collect();
        let all: Vec<Event> = whole.events().collect();
        assert_eq!(halves.len(), all.len());
        for (x, y) in halves.iter().zip(&all) {
            assert_eq!((x.second, &x.id), (y.second, &y.id));
            assert_eq!(x.readings[3].value, y.readings[3].value);
        }
        assert_eq!(second_half.readings() + spec().readings(), whole.readings());
    }

    #[test]
    fn floats_print_as_c_percent_e() {
        assert_eq!(percent_e(21.5), "2.150000e+01");
        assert_eq!(percent_e(0.0123), "1.230000e-02");
        assert_eq!(percent_e(-1234.5), "-1.234500e+03");
        assert_eq!(percent_e(0.0), "0.000000e+00");
    }

    #[test]
    fn the_stream_is_seeded_and_has_its_shape() {
        let a: Vec<Event> = spec().events().collect();
        let b: Vec<Event> = spec().events().collect();
        assert_eq!(a.len(), 12);
        assert_eq!(
            a.iter().map(|e| e.readings.len()).sum::<usize>() as u64,
            spec().readings()
        );
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.id, y.id);
            assert_eq!(x.readings[0].value, y.readings[0].value);
        }
        let id = &a[0].readings[0].id;
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(
            a[0].readings[0].value.contains("e+0"),
            "{}",
            a[0].readings[0].value
        );
        assert_ne!(a[0].id, a[1].id);
        assert_eq!(a[3].second, 1);
        assert_eq!(a[3].device, 0);
    }
}
