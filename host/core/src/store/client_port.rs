//! [`impl_execution_store!`](crate::impl_execution_store): the
//! [`ExecutionStore`](crate::ports::ExecutionStore) port of a storage backend, written once.
//! Every backend answers the port the same way — the empty-batch shortcut, whole-transaction
//! attempts run with the backend's retry policy under the operation's label (`submit`,
//! `submit_many`, `get`, `cancel`), an ambiguous submit commit resolved by re-reading
//! (docs/semantics.md#submit-and-idempotency) and the attempt reads of
//! [`AttemptReads`](crate::store::diagnostics::AttemptReads) — over its own per-attempt
//! methods, which hold its SQL.

/// Implements [`ExecutionStore`](crate::ports::ExecutionStore) for the backend type `$backend`,
/// which provides (crate-visible, inherent):
///
/// * `run` and `write_resolving_ambiguity` ([`tx_methods!`](crate::tx_methods));
/// * the per-attempt methods `submit_once(&PreparedSubmission)`,
///   `submit_many_once(&[PreparedSubmission])`, `get_once(namespace, id)`, `versions_once(&[Uuid])`,
///   `cancel_reason_once(namespace, id)` and `cancel_once(CancelTarget)`, each returning the backend's per-attempt
///   result;
/// * `lookup_fresh(&PreparedSubmission)` (the [`Lookup`](crate::store::Lookup) of the row
///   holding the submission's id or key) and `resolve_fresh(&[PreparedSubmission])` (per
///   submission, what landed), each on a connection of its own: the reads after an ambiguous
///   commit;
/// * `list_page(namespace, &ListFilter)`, answering `list` directly;
/// * [`AttemptReads`](crate::store::diagnostics::AttemptReads).
#[macro_export]
macro_rules! impl_execution_store {
    ($backend:ty) => {
        #[$crate::store::lease_port::__async_trait]
        impl $crate::ports::ExecutionStore for $backend {
            /// Submit (docs/semantics.md#submit-and-idempotency). An ambiguous commit is
            /// resolved by re-reading through the id and the idempotency key; when neither is
            /// found, the submission is written again.
            async fn submit(
                &self,
                sub: $crate::request::PreparedSubmission,
            ) -> ::std::result::Result<$crate::Execution, $crate::ExecutionError> {
                self.write_resolving_ambiguity(
                    "submit",
                    || self.submit_once(&sub),
                    || async {
                        let found = self.run("submit", || self.lookup_fresh(&sub)).await?;
                        Ok(found.outcome())
                    },
                )
                .await
            }

            /// submit_many: one transaction; duplicates and replays resolved per item.
            async fn submit_many(
                &self,
                subs: ::std::vec::Vec<$crate::request::PreparedSubmission>,
            ) -> ::std::result::Result<$crate::store::submit::BatchOutcomes, $crate::ExecutionError>
            {
                if subs.is_empty() {
                    return Ok(::std::vec::Vec::new());
                }
                self.write_resolving_ambiguity(
                    "submit_many",
                    || self.submit_many_once(&subs),
                    || async {
                        let resolved = self.run("submit", || self.resolve_fresh(&subs)).await?;
                        Ok($crate::store::submit::batch_landed(resolved))
                    },
                )
                .await
            }

            async fn get(
                &self,
                namespace: &str,
                id: $crate::store::lease_port::__Uuid,
            ) -> ::std::result::Result<
                ::std::option::Option<$crate::Execution>,
                $crate::ExecutionError,
            > {
                self.run("get", || self.get_once(namespace, id)).await
            }

            async fn versions(
                &self,
                ids: &[$crate::store::lease_port::__Uuid],
            ) -> ::std::result::Result<
                ::std::vec::Vec<($crate::store::lease_port::__Uuid, i64)>,
                $crate::ExecutionError,
            > {
                if ids.is_empty() {
                    return Ok(::std::vec::Vec::new());
                }
                self.run("get", || self.versions_once(ids)).await
            }

            async fn list(
                &self,
                namespace: &str,
                filter: &$crate::request::ListFilter,
            ) -> ::std::result::Result<$crate::ExecutionPage, $crate::ExecutionError> {
                self.list_page(namespace, filter).await
            }

            async fn cancel(
                &self,
                namespace: &str,
                id: $crate::store::lease_port::__Uuid,
                reason: ::std::option::Option<::std::string::String>,
            ) -> ::std::result::Result<
                ::std::option::Option<$crate::Execution>,
                $crate::ExecutionError,
            > {
                let target = $crate::store::submit::CancelTarget {
                    namespace,
                    id,
                    reason: reason.as_deref(),
                };
                self.run("cancel", || self.cancel_once(target)).await
            }

            async fn cancel_reason(
                &self,
                namespace: &str,
                id: $crate::store::lease_port::__Uuid,
            ) -> ::std::result::Result<
                ::std::option::Option<::std::option::Option<::std::string::String>>,
                $crate::ExecutionError,
            > {
                self.run("get", || self.cancel_reason_once(namespace, id))
                    .await
            }

            async fn attempts(
                &self,
                namespace: &str,
                id: $crate::store::lease_port::__Uuid,
            ) -> ::std::result::Result<
                ::std::option::Option<::std::vec::Vec<$crate::diagnostics::AttemptRecord>>,
                $crate::ExecutionError,
            > {
                $crate::store::diagnostics::AttemptReads::read_attempts(self, namespace, id).await
            }

            async fn attempt_log(
                &self,
                namespace: &str,
                id: $crate::store::lease_port::__Uuid,
                attempt_no: u32,
            ) -> ::std::result::Result<
                ::std::option::Option<::std::option::Option<$crate::diagnostics::LogTail>>,
                $crate::ExecutionError,
            > {
                $crate::store::diagnostics::AttemptReads::read_attempt_log(
                    self, namespace, id, attempt_no,
                )
                .await
            }
        }
    };
}
