//! Egress policy: which hosts and node-local ports a run may reach through
//! the node's egress proxy. An empty policy means no network at all.

use serde::Serialize;

/// A run's egress policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Egress {
    /// `--allow` entries, as given (validated by [`Egress::parse`]).
    pub allow: Vec<String>,
    /// `--forward` ports.
    pub forward: Vec<u16>,
}

/// Why an egress entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// Egress is not available in this build.
    #[error("--allow/--forward: egress through the node's proxy is not available in this build")]
    Unavailable,
}

impl Egress {
    /// Validates `--allow` and `--forward`.
    pub fn parse(allow: &[String], forward: &[u16]) -> Result<Self, NetError> {
        if !allow.is_empty() || !forward.is_empty() {
            return Err(NetError::Unavailable);
        }
        Ok(Egress::default())
    }

    /// True when the run gets a proxy.
    pub fn is_enabled(&self) -> bool {
        !self.allow.is_empty() || !self.forward.is_empty()
    }
}
