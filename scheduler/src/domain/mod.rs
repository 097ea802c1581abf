//! Chime's domain, free of I/O: schedules and their DST rules, misfire planning, jobs,
//! runs, retry decisions, and the validation that turns user input into these types.

pub mod access;
pub mod audit;
pub mod backfill;
pub mod behind;
pub mod broadcast;
pub mod cancel;
pub mod cron_schedule;
pub mod duration;
pub mod failure_pause;
pub mod fire_state;
pub mod job;
pub mod job_filter;
pub mod limits;
pub mod misfire;
pub mod overlap;
pub mod preview;
pub mod quota;
pub mod receipt;
pub mod reply_auth;
pub mod retry;
pub mod run;
pub mod run_filter;
pub mod run_stats;
pub mod schedule;
pub mod schedule_words;
pub mod shard;
pub mod timestamp;
pub mod validation;
pub mod window;
pub mod wire_schema;

pub use fire_state::FireState;
pub use job::{DeliveryMode, Job, JobFires, JobSettings, JobSpec, LiveZones, Target};
pub use job_filter::{JobFilter, JobPosition, JobSort};
pub use misfire::{FirePlan, MisfirePolicy, judge_recorded, plan_fires};
pub use overlap::OverlapPolicy;
pub use retry::Backoff;
pub use run::{Run, RunState, RunTrigger, WaitingFor};
pub use run_filter::RunFilter;
pub use schedule::Schedule;
pub use validation::FieldError;
pub use window::{DueTask, Window};
