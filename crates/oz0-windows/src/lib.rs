//! `oz0-windows`: Windows tier 1 (PSEC preview).
pub mod check;
pub mod cmdline;
pub mod env;
pub mod launch;
pub mod plan;
pub mod probe;
pub mod relay;
pub mod route;
pub mod winpath;
