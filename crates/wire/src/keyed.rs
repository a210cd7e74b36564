//! A reading as both codecs hand it to the engine: its key and its value bytes. A leaf, so that
//! the EdgeX mapping and the binary batch, which both produce it, need not import each other.

/// One reading ready for the engine: checked, keyed, its value encoded.
#[derive(Debug, Clone)]
pub struct KeyedReading {
    pub device: String,
    pub sensor: String,
    pub ts_ns: i64,
    pub value: Vec<u8>,
}

impl KeyedReading {
    /// The engine's record of it, borrowed: what `Engine::put_batch` takes.
    pub fn record(&self) -> roamkv_engine::Record<'_> {
        roamkv_engine::Record {
            device: &self.device,
            sensor: &self.sensor,
            ts_ns: self.ts_ns,
            value: &self.value,
        }
    }
}
