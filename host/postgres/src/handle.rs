//! [`Backend`] for [`PgBackend`]: the ports it hands out and its capability answers.

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::backend::{Backend, BackendCapabilities, SessionSummary, UpgradeReport};

use crate::backend::PgBackend;

#[async_trait]
impl Backend for PgBackend {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn server_version(&self) -> String {
        format!("PostgreSQL {}", self.server().version_string)
    }

    fn capabilities(&self) -> BackendCapabilities {
        let features = &self.schema_report().features;
        BackendCapabilities {
            diagnostics_persisted: features.diagnostics_table,
            schema_current: self.schema_report().upgrade_command.is_none(),
        }
    }

    onestep_core::backend_ports!();

    fn tables_created(&self) -> Vec<String> {
        self.schema_report().created.clone()
    }

    async fn upgrade(&self) -> Result<UpgradeReport, ExecutionError> {
        self.upgrade_tables().await
    }

    fn upgrade_command(&self) -> Option<String> {
        self.schema_report().upgrade_command.clone()
    }

    async fn session(&self) -> Result<SessionSummary, ExecutionError> {
        let s = self.session_state().await?;
        Ok(SessionSummary {
            time_zone: s.time_zone,
            isolation: s.isolation,
        })
    }

    async fn close(&self) -> Result<(), ExecutionError> {
        PgBackend::close(self).await
    }
}
