//! The walls a node's jobs run behind, chosen by its platform.

use std::sync::Arc;

use oz0_core::Sandbox;

#[cfg(target_os = "linux")]
use super::Settings;

/// The walls the node's jobs run behind, chosen by its platform.
pub struct Walls {
    /// Every shell job's: the node's tier-1 sandbox, or its tier-0 one.
    pub sandbox: Arc<dyn Sandbox>,
    /// The same tier-1 sandbox, for tool servers (none at tier 0).
    #[cfg(target_os = "linux")]
    pub host: Option<Arc<oz0_linux::Tier1>>,
    /// The node's egress proxy: a Mac's microVM tools with egress reach it.
    #[cfg(target_os = "macos")]
    pub egress: Arc<dyn oz0_egress::EgressService>,
}

impl Walls {
    /// Linux's: tier 0 (`--sandbox none`), or the node's host context.
    #[cfg(target_os = "linux")]
    pub(super) fn linux(s: &Settings) -> Result<Walls, crate::platform::PlatformError> {
        let walls = crate::platform::platform(crate::platform::Settings::of(&s.host));
        if s.sandbox_none {
            return Ok(Walls {
                sandbox: walls.tier0()?,
                host: None,
            });
        }
        let h = Arc::new(walls.tier1()?);
        Ok(Walls {
            sandbox: h.clone(),
            host: Some(h),
        })
    }
}
