//! Who may read the node's data directory and key, from their access
//! lists: the Windows form of Linux's 0700 data directory and 0600 key.
//!
//! The node's own user, `SYSTEM` and the Administrators group may; any
//! other allow entry that grants reading (of the folder's listing or a
//! file's data) to anyone else — Everyone, Users, Authenticated Users, ALL
//! APPLICATION PACKAGES (which every AppContainer and PSEC container
//! matches), another user — makes the folder not private. A missing access
//! list (a NULL DACL) lets everyone in. [`private_sddl`] is the access list
//! the node gives the folder: protected (nothing inherited), full control
//! for the user and `SYSTEM`, inherited by what is made inside.

use serde::Serialize;

/// One entry of an access list, as the native layer reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ace {
    /// The SID, as `S-1-…`.
    pub sid: String,
    /// An allow entry (deny entries only take away).
    pub allow: bool,
    /// The access mask.
    pub mask: u32,
    /// Applies only to what is made inside, not to the object itself.
    pub inherit_only: bool,
}

/// `FILE_READ_DATA` (a file) and `FILE_LIST_DIRECTORY` (a folder).
pub const FILE_READ_DATA: u32 = 0x0000_0001;
/// `GENERIC_READ`.
pub const GENERIC_READ: u32 = 0x8000_0000;
/// `GENERIC_ALL`.
pub const GENERIC_ALL: u32 = 0x1000_0000;

/// `SYSTEM`.
pub const SYSTEM: &str = "S-1-5-18";
/// The Administrators group.
pub const ADMINISTRATORS: &str = "S-1-5-32-544";
/// ALL APPLICATION PACKAGES: every AppContainer, every PSEC container.
pub const ALL_APPLICATION_PACKAGES: &str = "S-1-15-2-1";

/// A SID's name where Windows has a well-known one.
pub fn sid_name(sid: &str) -> &str {
    match sid {
        "S-1-1-0" => "Everyone",
        "S-1-5-11" => "Authenticated Users",
        "S-1-5-32-545" => "Users",
        "S-1-5-32-546" => "Guests",
        "S-1-5-4" => "INTERACTIVE",
        ALL_APPLICATION_PACKAGES => "ALL APPLICATION PACKAGES",
        "S-1-15-2-2" => "ALL RESTRICTED APPLICATION PACKAGES",
        SYSTEM => "SYSTEM",
        ADMINISTRATORS => "Administrators",
        other => other,
    }
}

/// Who besides `user`, `SYSTEM` and Administrators may read the object,
/// by name; empty when it is private. `None` is a missing access list.
pub fn readers_besides(aces: Option<&[Ace]>, user: &str) -> Vec<String> {
    let Some(aces) = aces else {
        return vec!["everyone (the folder has no access list)".to_string()];
    };
    let mut out: Vec<String> = Vec::new();
    for a in aces {
        let reads = a.mask & (FILE_READ_DATA | GENERIC_READ | GENERIC_ALL) != 0;
        let trusted = a.sid == user || a.sid == SYSTEM || a.sid == ADMINISTRATORS;
        if a.allow && reads && !a.inherit_only && !trusted {
            let n = sid_name(&a.sid).to_string();
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// Which containers the access list lets read the object, by name: a grant
/// to ALL APPLICATION PACKAGES (every AppContainer and PSEC container), to
/// ALL RESTRICTED APPLICATION PACKAGES, to one package or capability
/// (`S-1-15-2-…`, `S-1-15-3-…`); a missing access list lets every one in.
/// Grants to users and groups (Everyone, Users) are not a container's: a
/// container's access needs a grant to a package too.
pub fn container_readers(aces: Option<&[Ace]>) -> Vec<String> {
    let Some(aces) = aces else {
        return vec!["every container (the folder has no access list)".to_string()];
    };
    let mut out: Vec<String> = Vec::new();
    for a in aces {
        let reads = a.mask & (FILE_READ_DATA | GENERIC_READ | GENERIC_ALL) != 0;
        let package = a.sid.starts_with("S-1-15-2-") || a.sid.starts_with("S-1-15-3-");
        if a.allow && reads && !a.inherit_only && package {
            let n = sid_name(&a.sid).to_string();
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// The access list the node gives its data directory (SDDL): protected,
/// full control for `user` and `SYSTEM`, inherited by folders and files.
pub fn private_sddl(user: &str) -> String {
    format!("D:P(A;OICI;FA;;;{user})(A;OICI;FA;;;SY)")
}

/// The fix an operator runs when the node cannot make a folder private.
pub fn icacls_fix(path: &str) -> String {
    format!(
        "icacls \"{path}\" /inheritance:r /grant:r \"%USERNAME%:(OI)(CI)F\" \"SYSTEM:(OI)(CI)F\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "S-1-5-21-1-2-3-1001";

    fn ace(sid: &str, allow: bool, mask: u32, inherit_only: bool) -> Ace {
        Ace {
            sid: sid.into(),
            allow,
            mask,
            inherit_only,
        }
    }

    #[test]
    fn who_besides_the_node_may_read() {
        // The node's own list: private.
        let own = [
            ace(ME, true, 0x1f01ff, false),
            ace(SYSTEM, true, 0x1f01ff, false),
            ace(ADMINISTRATORS, true, 0x1f01ff, false),
        ];
        assert!(readers_besides(Some(&own), ME).is_empty());
        // Containers, Everyone, another user, by name; each once.
        let open = [
            ace(ME, true, 0x1f01ff, false),
            ace(ALL_APPLICATION_PACKAGES, true, 0x1200a9, false),
            ace("S-1-1-0", true, GENERIC_READ, false),
            ace("S-1-1-0", true, FILE_READ_DATA, false),
            ace("S-1-5-21-9-9-9-1002", true, GENERIC_ALL, false),
        ];
        assert_eq!(
            readers_besides(Some(&open), ME),
            [
                "ALL APPLICATION PACKAGES",
                "Everyone",
                "S-1-5-21-9-9-9-1002"
            ]
        );
        // Entries that do not let anyone read this folder.
        let harmless = [
            ace("S-1-5-32-545", false, GENERIC_ALL, false),
            ace("S-1-5-32-545", true, 0x0010_0000, false),
            ace("S-1-3-0", true, GENERIC_ALL, true),
        ];
        assert!(readers_besides(Some(&harmless), ME).is_empty());
        // No access list at all: everyone.
        assert_eq!(readers_besides(None, ME).len(), 1);
    }

    #[test]
    fn which_containers_may_read() {
        let own = [
            ace(ME, true, 0x1f01ff, false),
            ace(SYSTEM, true, 0x1f01ff, false),
            // Everyone alone lets no container in.
            ace("S-1-1-0", true, GENERIC_READ, false),
        ];
        assert!(container_readers(Some(&own)).is_empty());
        let open = [
            ace(ALL_APPLICATION_PACKAGES, true, 0x1200a9, false),
            ace(ALL_APPLICATION_PACKAGES, true, FILE_READ_DATA, false),
            ace("S-1-15-2-2", true, GENERIC_ALL, false),
            ace("S-1-15-3-1024-1", true, GENERIC_READ, false),
        ];
        assert_eq!(
            container_readers(Some(&open)),
            [
                "ALL APPLICATION PACKAGES",
                "ALL RESTRICTED APPLICATION PACKAGES",
                "S-1-15-3-1024-1"
            ]
        );
        let harmless = [
            ace(ALL_APPLICATION_PACKAGES, false, GENERIC_ALL, false),
            ace(ALL_APPLICATION_PACKAGES, true, 0x0010_0000, false),
            ace(ALL_APPLICATION_PACKAGES, true, GENERIC_ALL, true),
        ];
        assert!(container_readers(Some(&harmless)).is_empty());
        assert_eq!(container_readers(None).len(), 1);
    }

    #[test]
    fn the_private_list_and_the_fix() {
        assert_eq!(
            private_sddl(ME),
            "D:P(A;OICI;FA;;;S-1-5-21-1-2-3-1001)(A;OICI;FA;;;SY)"
        );
        assert_eq!(
            icacls_fix("C:\\oz0"),
            "icacls \"C:\\oz0\" /inheritance:r /grant:r \"%USERNAME%:(OI)(CI)F\" \"SYSTEM:(OI)(CI)F\""
        );
    }
}
