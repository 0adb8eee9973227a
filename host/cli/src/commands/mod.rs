//! One module per subcommand.

pub mod check;
pub mod client;
pub mod common;
pub mod migrate;
pub mod new;
pub mod render;
pub mod run;
pub mod serve;
pub mod task_run;
pub mod watch;
