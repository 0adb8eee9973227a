//! One module per subcommand.

pub(crate) mod check;
pub(crate) mod client;
pub(crate) mod common;
pub(crate) mod copy;
pub(crate) mod deploy;
pub(crate) mod dev;
pub(crate) mod events;
pub(crate) mod migrate;
pub(crate) mod new;
pub(crate) mod render;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod steps_file;
pub(crate) mod task_run;
pub(crate) mod watch;
