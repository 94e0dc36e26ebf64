//! The PSEC spec `CreateProcessSecurityEnvironment` takes: a FlatBuffer
//! with the file identifier `PSEC` whose root table is the process
//! security environment, in the layout Microsoft's MXC vendors for it
//! (`ProcessSecurityEnvironment.fbs`). Its slots, in order:
//!
//! | slot | field | type |
//! |---|---|---|
//! | 0 | `version` (required) | struct `{ major: u16, minor: u16 }` |
//! | 1 | `capabilities` | string, names joined with `,` |
//! | 2 | `disallow_win32k_system_calls` | bool |
//! | 3 | `ui_restrictions` | u64 |
//! | 4, 5, 6 | `fs_read_write`, `fs_read_only`, `fs_deny` | \[string\] |
//! | 7 | `network_policy` | table: `proxy` (table: `url` string), `egress` (table: `default_action` byte, deny 0 / allow 1, and rule lists), `allowed_appcontainer_peer` string, `ingress` (table: `default_action`, `host_loopback` bytes) |
//! | 8 | `fs_enumerate` (contract 1.1) | \[string\] |
//!
//! [`minimal_spec`] is the probe's create/close test (the version alone:
//! it grants nothing); [`encode`] is a run's whole request
//! ([`crate::plan::PsecRequest`]). Both are pure and tested here by
//! reading the bytes back by FlatBuffers' rules.

use flatbuffers::{FlatBufferBuilder, WIPOffset};

use crate::plan::{FilterAction, PsecRequest};
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

/// The vtable offset of a table's field in `slot` (FlatBuffers: 4 + 2 × slot).
const fn slot(n: u16) -> u16 {
    4 + 2 * n
}

/// `FilterAction` as the spec's byte enum.
fn action(a: FilterAction) -> u8 {
    match a {
        FilterAction::Deny => 0,
    }
}

/// A vector of the paths' strings.
fn strings<'b>(
    b: &mut FlatBufferBuilder<'b>,
    list: &[crate::winpath::WinPath],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<&'b str>>> {
    let items: Vec<WIPOffset<&str>> = list.iter().map(|p| b.create_string(p.as_str())).collect();
    b.create_vector(&items)
}

/// The whole spec for a run's request.
pub fn encode(r: &PsecRequest) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(1024);
    // Children first: FlatBuffers builds back to front.
    let capabilities =
        (!r.capabilities.is_empty()).then(|| b.create_string(&r.capabilities.join(",")));
    let rw = strings(&mut b, &r.fs_read_write);
    let ro = strings(&mut b, &r.fs_read_only);
    let deny = strings(&mut b, &r.fs_deny);
    let n = &r.network_policy;
    let proxy = n.proxy_url.as_deref().map(|url| {
        let url = b.create_string(url);
        let t = b.start_table();
        b.push_slot_always(slot(0), url);
        b.end_table(t)
    });
    let egress = n.egress.as_ref().map(|e| {
        let t = b.start_table();
        // Written even when it is the default (deny), so the bytes say it.
        b.push_slot_always(slot(0), action(e.default_action));
        b.end_table(t)
    });
    let peer = n
        .allowed_appcontainer_peer
        .as_deref()
        .map(|p| b.create_string(p));
    let ingress = n.ingress.as_ref().map(|i| {
        let t = b.start_table();
        b.push_slot_always(slot(0), action(i.default_action));
        b.push_slot_always(slot(1), action(i.host_loopback));
        b.end_table(t)
    });
    let network = {
        let t = b.start_table();
        if let Some(p) = proxy {
            b.push_slot_always(slot(0), p);
        }
        if let Some(e) = egress {
            b.push_slot_always(slot(1), e);
        }
        if let Some(p) = peer {
            b.push_slot_always(slot(2), p);
        }
        if let Some(i) = ingress {
            b.push_slot_always(slot(3), i);
        }
        b.end_table(t)
    };
    let root = b.start_table();
    // `version` is a struct of two u16 (major, minor), laid out in the
    // table as these four little-endian bytes.
    b.push_slot_always(
        slot(0),
        u32::from(r.version.major) | (u32::from(r.version.minor) << 16),
    );
    if let Some(c) = capabilities {
        b.push_slot_always(slot(1), c);
    }
    b.push_slot_always(slot(2), r.disallow_win32k_system_calls);
    b.push_slot_always(slot(3), u64::from(r.ui_restrictions));
    b.push_slot_always(slot(4), rw);
    b.push_slot_always(slot(5), ro);
    b.push_slot_always(slot(6), deny);
    b.push_slot_always(slot(7), network);
    let root = b.end_table(root);
    b.finish(root, Some("PSEC"));
    b.finished_data().to_vec()
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

    /// A FlatBuffer read back by its rules, independently of the builder:
    /// tables, their vtables, scalars, strings, vectors of strings.
    #[derive(Clone, Copy)]
    struct Table<'a> {
        buf: &'a [u8],
        at: usize,
    }

    impl<'a> Table<'a> {
        fn root(buf: &'a [u8]) -> Table<'a> {
            assert_eq!(&buf[4..8], FILE_IDENTIFIER);
            Table {
                buf,
                at: u32_at(buf, 0) as usize,
            }
        }
        /// Where field `slot` is, when present.
        fn field(&self, slot: usize) -> Option<usize> {
            let vt = usize::try_from(
                i64::try_from(self.at).unwrap() - i64::from(i32_at(self.buf, self.at)),
            )
            .unwrap();
            let vt_len = u16_at(self.buf, vt) as usize;
            let entry = 4 + 2 * slot;
            if entry + 2 > vt_len {
                return None;
            }
            match u16_at(self.buf, vt + entry) as usize {
                0 => None,
                off => Some(self.at + off),
            }
        }
        fn uoffset(&self, at: usize) -> usize {
            at + u32_at(self.buf, at) as usize
        }
        fn table(&self, slot: usize) -> Option<Table<'a>> {
            self.field(slot).map(|f| Table {
                buf: self.buf,
                at: self.uoffset(f),
            })
        }
        fn string_at(&self, at: usize) -> &'a str {
            let len = u32_at(self.buf, at) as usize;
            assert_eq!(self.buf[at + 4 + len], 0, "strings end in NUL");
            std::str::from_utf8(&self.buf[at + 4..at + 4 + len]).unwrap()
        }
        fn string(&self, slot: usize) -> Option<&'a str> {
            self.field(slot).map(|f| self.string_at(self.uoffset(f)))
        }
        fn strings(&self, slot: usize) -> Option<Vec<&'a str>> {
            self.field(slot).map(|f| {
                let v = self.uoffset(f);
                (0..u32_at(self.buf, v) as usize)
                    .map(|i| {
                        let e = v + 4 + 4 * i;
                        self.string_at(self.uoffset(e))
                    })
                    .collect()
            })
        }
        fn u8(&self, slot: usize) -> Option<u8> {
            self.field(slot).map(|f| self.buf[f])
        }
        fn u64(&self, slot: usize) -> Option<u64> {
            self.field(slot)
                .map(|f| u64::from_le_bytes(self.buf[f..f + 8].try_into().unwrap()))
        }
    }

    fn paths(v: &[crate::winpath::WinPath]) -> Vec<&str> {
        v.iter().map(|p| p.as_str()).collect()
    }

    #[test]
    fn a_runs_request_reads_back_field_by_field() {
        use crate::plan::tests::{egress_req, host, minimal_plan, token, w, V1_0_DENY, V1_1_ALL};
        use crate::plan::{plan, EgressSetup};
        use crate::relay::RelayPort;
        use oz0_policy::RunSpec;

        // No egress: deny everything, no proxy, no peer, no capability.
        let r = minimal_plan().request;
        let b = encode(&r);
        let t = Table::root(&b);
        let v = t.field(0).expect("version is required");
        assert_eq!((u16_at(&b, v), u16_at(&b, v + 2)), (1, 0));
        assert_eq!(t.string(1), None, "no capability");
        assert_eq!(t.u8(2), Some(0), "win32k stays");
        assert_eq!(t.u64(3), Some(u64::from(crate::plan::UI_RESTRICTIONS)));
        assert_eq!(t.strings(4).unwrap(), paths(&r.fs_read_write));
        assert_eq!(t.strings(5).unwrap(), paths(&r.fs_read_only));
        assert_eq!(t.strings(6).unwrap(), paths(&r.fs_deny));
        assert!(t
            .strings(6)
            .unwrap()
            .contains(&"C:\\Users\\me\\AppData\\Local\\orchestrator-zero-node"));
        let n = t.table(7).expect("a network policy");
        assert!(n.table(0).is_none(), "no proxy");
        assert_eq!(n.table(1).expect("egress").u8(0), Some(0), "deny");
        assert_eq!(n.string(2), None);
        assert!(n.table(3).is_none(), "no ingress table on 1.0");
        assert!(t.field(8).is_none(), "no enumerate paths");

        // The relay route: its capability, its profile as the one peer, the
        // proxy's URL without the token, no ingress table.
        let spec = RunSpec::new(egress_req()).unwrap();
        let relay = EgressSetup::Relay {
            port: RelayPort::new(47331).unwrap(),
            token: token(),
        };
        let r = plan(&spec, &host(), &V1_0_DENY, Some(&relay))
            .unwrap()
            .request;
        let b = encode(&r);
        let t = Table::root(&b);
        assert_eq!(t.string(1), Some("privateNetworkClientServer"));
        let n = t.table(7).unwrap();
        assert_eq!(
            n.table(0).unwrap().string(0),
            Some("http://127.0.0.1:47331")
        );
        assert!(n.table(1).is_none(), "no direct egress with a proxy");
        assert_eq!(n.string(2), Some(crate::relay::RELAY_PROFILE));
        assert!(n.table(3).is_none());
        assert!(
            !String::from_utf8_lossy(&b).contains("run-token"),
            "no token in the spec"
        );

        // The bridge route on 1.1: the ingress table (deny, deny) and
        // version 1.1.
        let bridge = EgressSetup::Bridge {
            port: 8119,
            token: token(),
            sockets_dir: w("C:\\Users\\me\\AppData\\Local\\Temp\\oz0-run-j1-sock"),
        };
        let r = plan(&spec, &host(), &V1_1_ALL, Some(&bridge))
            .unwrap()
            .request;
        let b = encode(&r);
        let t = Table::root(&b);
        let v = t.field(0).unwrap();
        assert_eq!((u16_at(&b, v), u16_at(&b, v + 2)), (1, 1));
        let n = t.table(7).unwrap();
        assert_eq!(n.table(0).unwrap().string(0), Some("http://127.0.0.1:8119"));
        let i = n.table(3).expect("ingress table");
        assert_eq!((i.u8(0), i.u8(1)), (Some(0), Some(0)));
        assert!(t
            .strings(4)
            .unwrap()
            .contains(&"C:\\Users\\me\\AppData\\Local\\Temp\\oz0-run-j1-sock"));
        // The minimal spec is what the probe hands over, unchanged.
        assert_eq!(Table::root(&minimal_spec(Contract::V1_1)).field(1), None);
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
