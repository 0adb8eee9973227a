//! Integration-test bodies every SQL backend runs on its real servers, written once against the
//! ports and stamped by each backend's test files (`host/mysql/tests`, `host/postgres/tests`),
//! like the conformance suite. Where a case needs what only the backend can do (raw SQL on its
//! tables, its seeder, capturing the statements it sends), it takes a small hook the backend's
//! test file implements, and the SQL stays there.
//!
//! * [`scale`]: the scripted workload of the `every_statement_*` cost checks, and
//!   [`shapes`]: the statement shapes they group the captured SQL by.
//! * [`undecodable`]: one undecodable row among good ones ([`undecodable::RawRows`]).
//! * [`copy`]: `onestep copy` between two stores, every column compared.
//! * [`history`]: the history seeder ([`history::HistoryRows`]).
//! * [`traces`]: the trace-context table ([`traces::TraceRows`]).
//! * [`reference`]: the Python reference client the interop tests drive.

pub mod copy;
pub mod history;
pub mod reference;
pub mod scale;
pub mod shapes;
pub mod traces;
pub mod undecodable;
