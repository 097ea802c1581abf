//! The [`Store`](super::Store) methods both backends route the same way: each to the
//! function of the same name in the backend's file for that concern (`jobs::get_job`,
//! `runs::mark_dispatched`, …), given the backend's pool for reads or for writes. Both
//! backends are split into the same file and function names, so the routing is written
//! once, here, and expanded inside each backend's `mod.rs`, where the unqualified paths
//! (`jobs::…`) resolve to that backend's modules. What differs between the backends (the
//! methods that need the PostgreSQL shard count, the backend's name) is passed in and
//! written beside the routed methods.

/// Implements [`Store`](crate::store::Store) for `$store`: the methods in `{ … }` as
/// written there, every other one routed to the backend's file of its concern with
/// `self.$reads` (reads outside a write transaction) or `self.$writes` (writes).
macro_rules! route_store {
    ($store:ty, reads: $reads:ident, writes: $writes:ident, { $($own:tt)* }) => {
        #[::async_trait::async_trait]
        impl $crate::store::Store for $store {
            $($own)*

            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                ::sqlx::query("SELECT 1").execute(&self.$reads).await?;
                Ok(())
            }

            async fn get_job(
                &self,
                id: ::uuid::Uuid,
            ) -> Result<Option<$crate::domain::Job>, $crate::store::StoreError> {
                jobs::get_job(&self.$reads, id).await
            }

            async fn search_jobs(
                &self,
                filter: &$crate::domain::JobFilter,
            ) -> Result<Vec<$crate::domain::Job>, $crate::store::StoreError> {
                job_search::search_jobs(&self.$reads, filter).await
            }

            async fn update_job(
                &self,
                job: &$crate::domain::Job,
                expected_version: i64,
                set_next_fire: bool,
            ) -> Result<$crate::domain::Job, $crate::store::StoreError> {
                jobs::update_job(&self.$writes, job, expected_version, set_next_fire).await
            }

            async fn failing_jobs(
                &self,
                shards: Option<&[u32]>,
            ) -> Result<Vec<$crate::domain::Job>, $crate::store::StoreError> {
                failures::failing_jobs(&self.$reads, shards).await
            }

            async fn delete_job(&self, id: ::uuid::Uuid) -> Result<bool, $crate::store::StoreError> {
                jobs::delete_job(&self.$writes, id).await
            }

            async fn target_groups(&self) -> Result<Vec<String>, $crate::store::StoreError> {
                jobs::target_groups(&self.$reads).await
            }

            async fn due_jobs(
                &self,
                after: $crate::store::DueCursor,
                before: ::chrono::DateTime<::chrono::Utc>,
                limit: u32,
                shards: Option<&[u32]>,
            ) -> Result<$crate::store::DuePage, $crate::store::StoreError> {
                fire::due_jobs(&self.$reads, after, before, limit, shards).await
            }

            async fn insert_run(
                &self,
                run: &$crate::domain::Run,
            ) -> Result<bool, $crate::store::StoreError> {
                fire::insert_run(&self.$writes, run).await
            }

            async fn insert_backfill(
                &self,
                job_id: ::uuid::Uuid,
                runs: &[$crate::domain::Run],
                require_idle: bool,
            ) -> Result<Option<::std::collections::HashSet<::uuid::Uuid>>, $crate::store::StoreError> {
                fire::insert_backfill(&self.$writes, job_id, runs, require_idle).await
            }

            async fn mark_dispatched(
                &self,
                run_ids: &[::uuid::Uuid],
                at: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<(), $crate::store::StoreError> {
                runs::mark_dispatched(&self.$writes, run_ids, at).await
            }

            async fn note_publish_failure(
                &self,
                run_id: ::uuid::Uuid,
                reason: &str,
            ) -> Result<(), $crate::store::StoreError> {
                runs::note_publish_failure(&self.$writes, run_id, reason).await
            }

            async fn scheduled_runs(
                &self,
                run_ids: &[::uuid::Uuid],
            ) -> Result<::std::collections::HashSet<::uuid::Uuid>, $crate::store::StoreError> {
                runs::scheduled_runs(&self.$reads, run_ids).await
            }

            async fn get_run(
                &self,
                id: ::uuid::Uuid,
            ) -> Result<Option<$crate::domain::Run>, $crate::store::StoreError> {
                runs::get_run(&self.$reads, id).await
            }

            async fn list_runs(
                &self,
                job_id: ::uuid::Uuid,
                page: &$crate::store::RunPage,
            ) -> Result<Vec<$crate::domain::Run>, $crate::store::StoreError> {
                runs::list_runs(&self.$reads, job_id, page).await
            }

            async fn search_runs(
                &self,
                filter: &$crate::domain::RunFilter,
            ) -> Result<Vec<$crate::domain::Run>, $crate::store::StoreError> {
                run_search::search_runs(&self.$reads, filter).await
            }

            async fn run_stats(
                &self,
                from: ::chrono::DateTime<::chrono::Utc>,
                until: ::chrono::DateTime<::chrono::Utc>,
                apps: Option<&[String]>,
            ) -> Result<Vec<$crate::domain::run_stats::RunCount>, $crate::store::StoreError> {
                run_stats::run_stats(&self.$reads, from, until, apps).await
            }

            async fn fire_items(
                &self,
                job_id: ::uuid::Uuid,
                fire_time: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<Vec<$crate::domain::Run>, $crate::store::StoreError> {
                runs::fire_items(&self.$reads, job_id, fire_time).await
            }

            async fn record_replies(
                &self,
                batch: &[&::chime_consumer::protocol::Reply],
                now: ::chrono::DateTime<::chrono::Utc>,
                jitter: &$crate::store::Jitter<'_>,
            ) -> Result<$crate::store::RecordedReplies, $crate::store::RepliesFailed> {
                replies::record_replies(&self.$writes, batch, now, jitter).await
            }

            async fn update_run(
                &self,
                run_id: ::uuid::Uuid,
                change: &$crate::store::RunChange<'_>,
            ) -> Result<Option<(bool, $crate::domain::Run)>, $crate::store::StoreError> {
                runs::update_run(&self.$writes, run_id, change).await
            }

            async fn note_on_run(
                &self,
                run_id: ::uuid::Uuid,
                record: &::chime_consumer::protocol::AttemptRecord,
            ) -> Result<bool, $crate::store::StoreError> {
                runs::note_on_run(&self.$writes, run_id, record).await
            }

            async fn overdue_runs(
                &self,
                now: ::chrono::DateTime<::chrono::Utc>,
                unconfirmed_before: ::chrono::DateTime<::chrono::Utc>,
                after: Option<(::chrono::DateTime<::chrono::Utc>, ::uuid::Uuid)>,
                limit: u32,
                shards: Option<&[u32]>,
            ) -> Result<Vec<$crate::store::OverdueRun>, $crate::store::StoreError> {
                reconcile::overdue_runs(&self.$reads, now, unconfirmed_before, after, limit, shards)
                    .await
            }

            async fn next_attempts(
                &self,
                runs: &[$crate::store::NextAttempt<'_>],
                now: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<::std::collections::HashSet<::uuid::Uuid>, $crate::store::StoreError> {
                reconcile::next_attempts(&self.$writes, runs, now).await
            }

            async fn kill_run(
                &self,
                run_id: ::uuid::Uuid,
                expect: $crate::store::Expect,
                reason: &str,
                record: Option<&::chime_consumer::protocol::AttemptRecord>,
                dead_lettered: bool,
                now: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<bool, $crate::store::StoreError> {
                reconcile::kill_run(
                    &self.$writes,
                    run_id,
                    expect,
                    reason,
                    record,
                    dead_lettered,
                    now,
                )
                .await
            }

            async fn mark_dead_lettered(
                &self,
                run_id: ::uuid::Uuid,
            ) -> Result<(), $crate::store::StoreError> {
                reconcile::mark_dead_lettered(&self.$writes, run_id).await
            }

            async fn await_consumer(
                &self,
                runs: &[(::uuid::Uuid, u32)],
                now: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<::std::collections::HashSet<::uuid::Uuid>, $crate::store::StoreError> {
                reconcile::await_consumer(&self.$writes, runs, now).await
            }

            async fn release_held(
                &self,
                due_at: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<u64, $crate::store::StoreError> {
                reconcile::release_held(&self.$reads, &self.$writes, due_at).await
            }

            async fn live_zones(
                &self,
                since: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<$crate::domain::LiveZones, $crate::store::StoreError> {
                presence::live_zones(&self.$reads, since).await
            }

            async fn observed_patterns(
                &self,
                since: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<Vec<String>, $crate::store::StoreError> {
                presence::observed_patterns(&self.$reads, since).await
            }

            async fn consumers(
                &self,
                since: ::chrono::DateTime<::chrono::Utc>,
                group: Option<&str>,
            ) -> Result<Vec<$crate::store::ConsumerInstance>, $crate::store::StoreError> {
                presence::consumers(&self.$reads, since, group).await
            }

            async fn queued_by_group(&self) -> Result<Vec<(String, u64)>, $crate::store::StoreError> {
                presence::queued_by_group(&self.$reads).await
            }

            async fn observer_names(&self) -> Result<Vec<String>, $crate::store::StoreError> {
                presence::observer_names(&self.$reads).await
            }

            async fn prune_runs(
                &self,
                cutoff: ::chrono::DateTime<::chrono::Utc>,
                limit: u32,
            ) -> Result<u64, $crate::store::StoreError> {
                retention::prune_runs(&self.$writes, cutoff, limit).await
            }

            async fn prune_consumers(
                &self,
                cutoff: ::chrono::DateTime<::chrono::Utc>,
                limit: u32,
            ) -> Result<u64, $crate::store::StoreError> {
                retention::prune_consumers(&self.$writes, cutoff, limit).await
            }

            async fn prune_observers(
                &self,
                cutoff: ::chrono::DateTime<::chrono::Utc>,
                limit: u32,
            ) -> Result<u64, $crate::store::StoreError> {
                retention::prune_observers(&self.$writes, cutoff, limit).await
            }

            async fn count_app_jobs(&self, app: &str) -> Result<u64, $crate::store::StoreError> {
                jobs::count_app_jobs(&self.$reads, app).await
            }

            async fn app_uses_group(
                &self,
                app: &str,
                group: &str,
            ) -> Result<bool, $crate::store::StoreError> {
                jobs::app_uses_group(&self.$reads, app, group).await
            }

            async fn app_groups(&self, app: &str) -> Result<Vec<String>, $crate::store::StoreError> {
                jobs::app_groups(&self.$reads, app).await
            }

            async fn insert_audit(
                &self,
                entries: &[$crate::domain::audit::AuditEntry],
            ) -> Result<(), $crate::store::StoreError> {
                audit::insert_audit(&self.$writes, entries).await
            }

            async fn list_audit(
                &self,
                query: &$crate::domain::audit::AuditQuery,
            ) -> Result<Vec<$crate::domain::audit::AuditEntry>, $crate::store::StoreError> {
                audit::list_audit(&self.$reads, query).await
            }

            async fn prune_audit(
                &self,
                cutoff: ::chrono::DateTime<::chrono::Utc>,
                limit: u32,
            ) -> Result<u64, $crate::store::StoreError> {
                audit::prune_audit(&self.$writes, cutoff, limit).await
            }

            async fn insert_token(
                &self,
                token: &$crate::store::StoredToken,
            ) -> Result<bool, $crate::store::StoreError> {
                tokens::insert_token(&self.$writes, token).await
            }

            async fn list_tokens(
                &self,
            ) -> Result<Vec<$crate::store::StoredToken>, $crate::store::StoreError> {
                tokens::list_tokens(&self.$reads).await
            }

            async fn revoke_token(
                &self,
                name: &str,
                at: ::chrono::DateTime<::chrono::Utc>,
            ) -> Result<Option<$crate::domain::access::ApiToken>, $crate::store::StoreError> {
                tokens::revoke_token(&self.$writes, name, at).await
            }
        }
    };
}
