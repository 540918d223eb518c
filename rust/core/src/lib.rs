//! pybkx's data plane: bookie storage (journal, entry logs, index), the wire protocol, the bookie
//! server, the client's per-bookie connections and the per-ledger quorum engine. No Python here:
//! the `pybkx-py` crate wraps this crate as the extension module `pybkx._core`.
//!
//! Everything done once per entry lives here; decisions made once per ledger, bookie or failure
//! (metadata, placement, recovery planning, configuration) are the Python control plane's.

pub mod aligned;
#[cfg(feature = "bench")]
pub mod bench;
pub mod bookie_conn;
pub mod config;
pub mod digest;
pub mod done;
pub mod error;
pub mod fs;
pub mod ledger;
pub mod metrics;
pub mod net;
pub mod protocol;
pub mod queue;
pub mod record;
pub mod runtime;
pub mod sasl;
pub mod server;
pub mod storage;
pub mod tls;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
pub(crate) mod testing;
