//! Unit tests of the reconciler's pure parts.

/// The default `takeover_ack_wait`.
const TAKEOVER_ACK_WAIT: Duration = Duration::from_millis(500);
use super::*;
use crate::timer::TimerSettings;

fn arming_horizon(fire_ahead: Duration) -> Duration {
    TimerSettings {
        lookahead: Duration::from_secs(60),
        misfire_grace: Duration::from_secs(5),
        fire_ahead,
    }
    .arming_horizon()
}

#[test]
fn a_takeover_of_many_pages_waits_for_acks_once() {
    let start = tokio::time::Instant::now();
    let wait = TAKEOVER_ACK_WAIT;
    let mut deadline = None;
    let first = takeover_deadline(&mut deadline, start, wait);
    assert_eq!(first, start + wait);
    // A later page, read after the first page's wait ran out, does not wait again.
    let later = takeover_deadline(&mut deadline, start + wait * 3, wait);
    assert_eq!(later, first);
    // A new pass waits afresh.
    let mut next_pass = None;
    assert_eq!(
        takeover_deadline(&mut next_pass, start + wait * 3, wait),
        start + wait * 4
    );
}

#[test]
fn a_pass_report_says_why_each_run_went_out_again() {
    let mut report = PassReport::default();
    for reason in ["ack_timeout", "unconfirmed", "ack_timeout", "retry"] {
        report.count_republished(reason);
    }
    assert_eq!(report.republished(), 4);
    assert_eq!(
        report.republish_reasons(),
        "ack_timeout=2 retry=1 unconfirmed=1"
    );
}

#[test]
fn a_takeover_collects_everything_the_previous_owner_may_have_armed() {
    for fire_ahead in [0, 500, 2_000, 10_000].map(Duration::from_millis) {
        let settings = ReconcileSettings {
            republish_after: Duration::from_secs(10),
            interval: Duration::from_secs(1),
            armed_ahead: arming_horizon(fire_ahead),
            misfire_grace: Duration::from_secs(5),
            takeover_ack_wait: TAKEOVER_ACK_WAIT,
        };
        // One fire transaction records up to the horizon, past `fire_ahead` itself.
        let armed = chrono::Duration::from_std(arming_horizon(fire_ahead)).unwrap();
        assert!(armed >= chrono::Duration::from_std(fire_ahead).unwrap());
        for kind in [PassKind::Start, PassKind::Takeover] {
            assert!(
                unconfirmed_cutoff(&settings, kind) > armed,
                "{fire_ahead:?}"
            );
        }
        assert_eq!(
            unconfirmed_cutoff(&settings, PassKind::Periodic),
            -chrono::Duration::seconds(10)
        );
    }
    // A herd may be armed up to 10 s ahead with the default 2 s `fire_ahead`.
    assert_eq!(
        arming_horizon(Duration::from_secs(2)),
        Duration::from_millis(10_200)
    );
    assert_eq!(arming_horizon(Duration::ZERO), Duration::ZERO);
}
