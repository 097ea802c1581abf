//! Per-app quotas: how many jobs an app may have, and how many distinct consumer groups
//! its jobs may target (each group is a quorum queue on the broker, which costs memory
//! even when empty, so one app must not be able to create thousands). Pure: the jobs
//! service counts, this decides.

/// The limits; 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Jobs per app (`app_max_jobs`).
    pub max_jobs: u64,
    /// Distinct target groups per app (`app_max_groups`).
    pub max_groups: u64,
}

impl Default for Quotas {
    /// The documented defaults (docs/configuration.md): a million jobs and 100 groups.
    fn default() -> Self {
        Self {
            max_jobs: 1_000_000,
            max_groups: 100,
        }
    }
}

/// A quota a change would exceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaExceeded {
    /// Too many jobs.
    #[error("app {app:?} would have {would_have} jobs, over its quota of {limit} (app_max_jobs)")]
    Jobs {
        /// The app.
        app: String,
        /// Its jobs after the change.
        would_have: u64,
        /// The quota.
        limit: u64,
    },
    /// Too many distinct target groups.
    #[error(
        "app {app:?} would target {would_have} consumer groups, over its quota of {limit} (app_max_groups); reuse one of its groups"
    )]
    Groups {
        /// The app.
        app: String,
        /// Its groups after the change.
        would_have: u64,
        /// The quota.
        limit: u64,
    },
}

impl Quotas {
    /// Whether `app` may have `jobs` jobs.
    pub fn check_jobs(&self, app: &str, jobs: u64) -> Result<(), QuotaExceeded> {
        if self.max_jobs == 0 || jobs <= self.max_jobs {
            return Ok(());
        }
        Err(QuotaExceeded::Jobs {
            app: app.to_string(),
            would_have: jobs,
            limit: self.max_jobs,
        })
    }

    /// Whether `app` may target `groups` distinct groups.
    pub fn check_groups(&self, app: &str, groups: u64) -> Result<(), QuotaExceeded> {
        if self.max_groups == 0 || groups <= self.max_groups {
            return Ok(());
        }
        Err(QuotaExceeded::Groups {
            app: app.to_string(),
            would_have: groups,
            limit: self.max_groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_inclusive_and_zero_means_none() {
        let quotas = Quotas {
            max_jobs: 2,
            max_groups: 1,
        };
        assert!(quotas.check_jobs("a", 2).is_ok());
        assert_eq!(
            quotas.check_jobs("a", 3).unwrap_err().to_string(),
            "app \"a\" would have 3 jobs, over its quota of 2 (app_max_jobs)"
        );
        assert!(quotas.check_groups("a", 1).is_ok());
        assert!(matches!(
            quotas.check_groups("a", 2),
            Err(QuotaExceeded::Groups { limit: 1, .. })
        ));
        let none = Quotas {
            max_jobs: 0,
            max_groups: 0,
        };
        assert!(none.check_jobs("a", u64::MAX).is_ok());
        assert!(none.check_groups("a", u64::MAX).is_ok());
    }
}
