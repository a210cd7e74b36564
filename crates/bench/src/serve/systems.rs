//! The systems `roamkv bench serve` can load, by name, and what kind each is: a server over
//! HTTP (targets.rs), a peer (peers.rs), the in-process engine, or a path through the MQTT
//! message bus (bus.rs).

use rumqttc::QoS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Target {
    /// `roamkv serve`, EdgeX v3 events (JSON) over HTTP.
    Roamkv,
    /// `roamkv serve`, the same readings as native binary batches.
    RoamkvBinary,
    /// `roamkv serve` with its cloud sink on (`--sink`, into a private PostgreSQL on this
    /// machine), EdgeX JSON as `roamkv`: what the sink costs ingest.
    RoamkvSink,
    /// `roamkv serve --event-id-index false`, EdgeX JSON as `roamkv`: what the index of event
    /// ids costs ingest (`--engines roamkv,roamkv-no-index`).
    RoamkvNoIndex,
    /// `roamkv serve --mqtt-broker`: the same events in EdgeX MessageEnvelopes, published at
    /// QoS 0 by MQTT publishers to a real mosquitto (bus.rs).
    RoamkvBusQos0,
    /// The same at QoS 1 (each publish waits for the broker's PUBACK, as go-mod-messaging's does).
    RoamkvBusQos1,
    /// The same messages at QoS 0 through the same mosquitto to its own subscriber
    /// (`mosquitto_sub`), which writes nothing: the bus path's ceiling.
    MosquittoQos0,
    /// The ceiling at QoS 1.
    MosquittoQos1,
    /// InfluxDB 1.6, line protocol over HTTP, WAL fsync'd per write.
    Influxdb,
    /// QuestDB 9.2, line protocol over HTTP, commits fsync'd under `--durability sync`.
    Questdb,
    /// The in-process engine writing the same batches (the ceiling).
    Engine,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Roamkv => "roamkv",
            Target::RoamkvBinary => "roamkv-binary",
            Target::RoamkvSink => "roamkv-sink",
            Target::RoamkvNoIndex => "roamkv-no-index",
            Target::RoamkvBusQos0 => "roamkv-bus-qos0",
            Target::RoamkvBusQos1 => "roamkv-bus-qos1",
            Target::MosquittoQos0 => "mosquitto-qos0",
            Target::MosquittoQos1 => "mosquitto-qos1",
            Target::Influxdb => "influxdb",
            Target::Questdb => "questdb",
            Target::Engine => "engine",
        }
    }

    /// The systems a run takes when none are named (the sink's cost is its own comparison:
    /// `--engines roamkv,roamkv-sink`).
    pub fn all() -> [Target; 9] {
        [
            Target::Roamkv,
            Target::RoamkvBinary,
            Target::RoamkvBusQos0,
            Target::RoamkvBusQos1,
            Target::MosquittoQos0,
            Target::MosquittoQos1,
            Target::Influxdb,
            Target::Questdb,
            Target::Engine,
        ]
    }

    /// A third-party server (peers.rs), not roamkv.
    pub fn is_peer(self) -> bool {
        matches!(self, Target::Influxdb | Target::Questdb)
    }

    /// The QoS of a path through the message bus; None for the others.
    pub fn bus_qos(self) -> Option<QoS> {
        match self {
            Target::RoamkvBusQos0 | Target::MosquittoQos0 => Some(QoS::AtMostOnce),
            Target::RoamkvBusQos1 | Target::MosquittoQos1 => Some(QoS::AtLeastOnce),
            _ => None,
        }
    }

    /// A path through the message bus (bus.rs).
    pub fn is_bus(self) -> bool {
        self.bus_qos().is_some()
    }

    /// Whether requests go over HTTP (and so have a server process that answers each one).
    pub fn is_http(self) -> bool {
        self != Target::Engine && !self.is_bus()
    }
}
