//! The smallest PSEC spec: the one the probe's create/close test hands to
//! `CreateProcessSecurityEnvironment`.
//!
//! A PSEC spec is a FlatBuffer with the file identifier `PSEC` whose root
//! table's first field is the required `version` struct
//! (`SchemaVersion { major: u16, minor: u16 }`). The test spec carries that
//! field only — no capability, no file access, no network — so that it
//! grants nothing. Encoding whole run requests is the launcher's part; it is
//! not done here.

use crate::probe::Contract;

/// The file identifier of a PSEC spec.
pub const FILE_IDENTIFIER: &[u8; 4] = b"PSEC";

/// The minimal spec for `contract`, byte for byte:
///
/// | offset | bytes | meaning |
/// |---|---|---|
/// | 0 | `10 00 00 00` | root table at 16 |
/// | 4 | `PSEC` | file identifier |
/// | 8 | `06 00` `08 00` `04 00` | vtable: 6 bytes, table of 8 bytes, field 0 at +4 |
/// | 14 | `00 00` | padding (tables are 4-aligned) |
/// | 16 | `08 00 00 00` | table: its vtable is 8 bytes before it |
/// | 20 | major, minor (u16 LE each) | `version` |
pub fn minimal_spec(contract: Contract) -> Vec<u8> {
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(FILE_IDENTIFIER);
    for v in [6u16, 8, 4, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&8i32.to_le_bytes());
    b.extend_from_slice(&contract.major.to_le_bytes());
    b.extend_from_slice(&contract.minor.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn i32_at(b: &[u8], at: usize) -> i32 {
        i32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Reads the spec back by FlatBuffers' rules.
    #[test]
    fn decodes_by_flatbuffer_rules() {
        let b = minimal_spec(Contract::V1_1);
        assert_eq!(b.len(), 24);
        assert_eq!(&b[4..8], FILE_IDENTIFIER);
        let table = u32_at(&b, 0) as usize;
        assert_eq!(table % 4, 0);
        let vtable =
            usize::try_from(i64::try_from(table).unwrap() - i64::from(i32_at(&b, table))).unwrap();
        assert_eq!(vtable % 2, 0);
        let vt_len = u16_at(&b, vtable) as usize;
        assert!(vt_len >= 6, "vtable has a slot for field 0");
        assert!(table + u16_at(&b, vtable + 2) as usize <= b.len());
        let field0 = u16_at(&b, vtable + 4) as usize;
        assert_ne!(field0, 0, "version is present");
        assert_eq!(u16_at(&b, table + field0), 1);
        assert_eq!(u16_at(&b, table + field0 + 2), 1);
        assert_eq!(
            minimal_spec(Contract::V1_0),
            [16, 0, 0, 0, b'P', b'S', b'E', b'C', 6, 0, 8, 0, 4, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0]
        );
    }
}
