//! The protobuf wire format, written by hand for the two messages llmload sends (remote-write's
//! `WriteRequest`, OTLP's `ExportTraceServiceRequest`): a field is a key (its number and wire
//! type) and a value; a message inside another is its bytes, length first. The generated-code
//! route needs protoc and a build script for a dozen messages written once each.
//!
//! Not for: reading protobuf (llmload only sends it).

/// A field's key: its number and wire type (0 varint, 1 fixed 64-bit, 2 length-delimited, 5
/// fixed 32-bit).
pub(super) fn key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire_type)));
}

/// A length-delimited field: bytes, a string, or a message already written.
pub(super) fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A varint field (`int64`, `uint32`, an enum, a `bool`).
pub(super) fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, 0);
    varint(out, value);
}

/// A `fixed64` field (OTLP's nanosecond times).
pub(super) fn fixed64_field(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, 1);
    out.extend_from_slice(&value.to_le_bytes());
}

/// A `double` field.
pub(super) fn double_field(out: &mut Vec<u8>, field: u32, value: f64) {
    key(out, field, 1);
    out.extend_from_slice(&value.to_le_bytes());
}

/// A base-128 varint, least significant group first.
pub(super) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_take_seven_bits_a_byte() {
        let mut out = Vec::new();
        varint(&mut out, 1);
        varint(&mut out, 300);
        varint(&mut out, u64::MAX);
        assert_eq!(&out[..3], [0x01, 0xac, 0x02]);
        assert_eq!(out.len(), 3 + 10);
    }

    #[test]
    fn fields_are_a_key_then_a_value() {
        let mut out = Vec::new();
        bytes_field(&mut out, 5, b"hi");
        varint_field(&mut out, 6, 3);
        fixed64_field(&mut out, 7, 1);
        // Field 5, type 2 → 0x2a; field 6, type 0 → 0x30; field 7, type 1 → 0x39.
        assert_eq!(
            out,
            [0x2a, 2, b'h', b'i', 0x30, 3, 0x39, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        let mut wide = Vec::new();
        // Field 16 needs two bytes of key: (16 << 3 | 5) = 133.
        key(&mut wide, 16, 5);
        assert_eq!(wide, [0x85, 0x01]);
    }
}
