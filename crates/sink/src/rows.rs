//! The readings and departures of one write to the destination, in log order.

/// Rows of one transaction: each (device, sensor, ts) once, with the last value pushed for it.
#[derive(Debug, Default)]
pub struct Rows {
    pub devices: Vec<String>,
    pub sensors: Vec<String>,
    pub ts_ns: Vec<i64>,
    pub values: Vec<Vec<u8>>,
    /// (device, position after its DEPART).
    pub departures: Vec<(String, String)>,
    /// Where each key's row is, so that a later write of it replaces the value.
    at: std::collections::HashMap<(String, String, i64), usize>,
}

impl Rows {
    /// Adds a reading, in log order: a key pushed before gets this value (the last write
    /// wins, as in the engine).
    pub fn push(&mut self, device: String, sensor: String, ts_ns: i64, value: Vec<u8>) {
        let key = (device, sensor, ts_ns);
        if let Some(&i) = self.at.get(&key) {
            self.values[i] = value;
            return;
        }
        let (device, sensor, ts_ns) = key;
        self.at
            .insert((device.clone(), sensor.clone(), ts_ns), self.devices.len());
        self.devices.push(device);
        self.sensors.push(sensor);
        self.ts_ns.push(ts_ns);
        self.values.push(value);
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty() && self.departures.is_empty()
    }
}
