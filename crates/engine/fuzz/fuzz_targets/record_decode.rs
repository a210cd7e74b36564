//! The commit-log decoders on arbitrary bytes: must never panic, and whatever decodes as a
//! record must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roamkv_engine::log_record::{self as record, Body, Decode};

fuzz_target!(|data: &[u8]| {
    let seq_low = data.get(8..12).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if let Decode::Record(d) = record::decode(data, seq_low) {
        let mut again = Vec::new();
        match d.body {
            Body::Put { device, sensor, ts_ns, value } => {
                let crc = record::encode_put_unsealed(&mut again, device, sensor, ts_ns, value);
                record::seal(&mut again, seq_low, d.batch_end, crc);
            }
            Body::Puts { device, readings } => {
                let crc = record::encode_puts_unsealed(
                    &mut again,
                    device,
                    readings.iter().map(|r| (r.sensor, r.ts_ns, r.value)),
                );
                record::seal(&mut again, seq_low, d.batch_end, crc);
                // Varints may be written longer than needed and the first delta need not be 0:
                // a PUTS record re-encodes to the same readings, not always the same bytes.
                let Decode::Record(again_d) = record::decode(&again, seq_low) else {
                    panic!("a re-encoded PUTS record does not decode");
                };
                let Body::Puts { readings: again_r, .. } = again_d.body else {
                    panic!("a re-encoded PUTS record decodes as another kind");
                };
                assert!(readings.iter().eq(again_r.iter()));
            }
            Body::Register { device, registered_at_ms } => record::encode_register(&mut again, seq_low, device, registered_at_ms),
            Body::Depart { device } => record::encode_depart(&mut again, seq_low, device),
            Body::Trim { device, before_ns } => record::encode_trim(&mut again, seq_low, device, before_ns),
            Body::SegmentEnd { next_seq, sealed_at_ms } => {
                record::encode_segment_end(&mut again, seq_low, next_seq, sealed_at_ms)
            }
        }
        // The encoder writes REGISTER as mid-batch and DEPART, SEGMENT_END and TRIM as batch end; other flag values
        // decode fine but do not re-encode to the same bytes.
        // SYNCED_BEFORE is set by the group commit's writer, not by the encoders.
        let canonical = !d.synced_before
            && match d.body {
                Body::Register { .. } => !d.batch_end,
                Body::Depart { .. } | Body::SegmentEnd { .. } | Body::Trim { .. } => d.batch_end,
                Body::Put { .. } => true,
                Body::Puts { .. } => false,
            };
        if canonical {
            assert_eq!(&again[..], &data[..d.len]);
        }
    }
    // The segment scanner over the same bytes, treated as a whole segment.
    let _ = roamkv_engine::segment::scan(data, seq_low, |_, _| Ok(()));
});
