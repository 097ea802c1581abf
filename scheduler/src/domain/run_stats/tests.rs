//! Unit tests of the run statistics: the histogram's buckets and percentiles, the
//! window's buckets, and the layout of the stores' counts.

use proptest::prelude::*;

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

#[test]
fn lateness_falls_in_the_first_bucket_whose_upper_edge_holds_it() {
    assert_eq!(lateness_bucket(-3.0), 0);
    assert_eq!(lateness_bucket(0.0), 0);
    assert_eq!(lateness_bucket(0.4), 1);
    assert_eq!(lateness_bucket(1.0), 1);
    assert_eq!(lateness_bucket(35.0), 6);
    assert_eq!(lateness_bucket(60_000.0), 15);
    assert_eq!(lateness_bucket(60_000.5), 16);
    assert_eq!(bucket_value(6), 50);
    assert_eq!(
        bucket_value(16),
        60_000,
        "the overflow bucket reads as the last edge"
    );
}

#[test]
fn percentiles_are_the_upper_edge_of_the_bucket_holding_the_rank() {
    let mut h = Histogram::default();
    h.add(lateness_bucket(4.0), 50); // <= 5
    h.add(lateness_bucket(35.0), 45); // <= 50
    h.add(lateness_bucket(300.0), 4); // <= 500
    h.add(lateness_bucket(90_000.0), 1); // overflow
    assert_eq!(h.total(), 100);
    assert_eq!(
        h.percentiles(),
        Percentiles {
            p50: Some(5),
            p95: Some(50),
            p99: Some(500)
        }
    );
    assert_eq!(h.percentile(100), Some(60_000));
    // Rank 1 of 1: the one run.
    let mut one = Histogram::default();
    one.add(lateness_bucket(7.0), 1);
    assert_eq!(one.percentiles().p50, Some(10));
    assert_eq!(one.percentiles().p99, Some(10));
    assert_eq!(Histogram::default().percentiles(), Percentiles::default());
    // A bucket number beyond the histogram is not counted.
    one.add(LATENESS_BUCKETS, 5);
    assert_eq!(one.total(), 1);
}

#[test]
fn minutes_are_5_to_1440_and_buckets_stay_at_most_120() {
    assert_eq!(StatsMinutes::new(4), None);
    assert_eq!(StatsMinutes::new(1441), None);
    assert_eq!(StatsMinutes::new(5).map(StatsMinutes::get), Some(5));
    let now = t("2026-11-28T09:59:30.250Z");
    for (minutes, bucket_s, buckets) in [
        (5, 60, 5),
        (60, 60, 60),
        (120, 60, 120),
        (121, 300, 25),
        (600, 300, 120),
        (601, 900, 41),
        (1440, 900, 96),
    ] {
        let window = StatsWindow::ending_at(now, StatsMinutes::new(minutes).unwrap());
        assert_eq!(window.bucket_s, bucket_s, "{minutes}");
        assert_eq!(window.buckets(), buckets, "{minutes}");
        assert_eq!(
            window.from.timestamp() % i64::from(bucket_s),
            0,
            "{minutes}"
        );
        assert!(window.from <= now && now < window.to, "{minutes}");
        assert!(window.to - window.from >= Duration::minutes(i64::from(minutes)));
    }
    let hour = StatsWindow::ending_at(now, StatsMinutes::DEFAULT);
    assert_eq!(hour.from, t("2026-11-28T09:00:00Z"));
    assert_eq!(hour.to, t("2026-11-28T10:00:00Z"));
}

#[test]
fn counts_are_laid_out_in_their_buckets_with_every_bucket_present() {
    let now = t("2026-11-28T09:59:00Z");
    let window = StatsWindow::ending_at(now, StatsMinutes::new(5).unwrap());
    assert_eq!(window.from, t("2026-11-28T09:55:00Z"));
    let minute = |s: &str| t(s).timestamp() / 60;
    let count = |at: &str, state, retried, lateness: Option<f64>, runs| RunCount {
        minute: minute(at),
        state,
        retried,
        lateness: lateness.map(lateness_bucket),
        runs,
    };
    let counts = [
        count(
            "2026-11-28T09:55:00Z",
            RunState::Succeeded,
            false,
            Some(3.0),
            8,
        ),
        count("2026-11-28T09:55:00Z", RunState::Failed, true, None, 1),
        count("2026-11-28T09:55:00Z", RunState::Dead, true, None, 1),
        count("2026-11-28T09:58:00Z", RunState::Scheduled, false, None, 2),
        count(
            "2026-11-28T09:58:00Z",
            RunState::Cancelled,
            false,
            Some(700.0),
            1,
        ),
        count(
            "2026-11-28T09:59:00Z",
            RunState::Acked,
            false,
            Some(15.0),
            3,
        ),
        // Outside the window: ignored.
        count(
            "2026-11-28T09:54:00Z",
            RunState::Succeeded,
            false,
            Some(1.0),
            100,
        ),
        count(
            "2026-11-28T10:00:00Z",
            RunState::Succeeded,
            false,
            Some(1.0),
            100,
        ),
    ];
    let stats = summarise(&window, &counts);
    assert_eq!(stats.buckets.len(), 5);
    let first = &stats.buckets[0];
    assert_eq!(first.at, window.from);
    assert_eq!(
        (
            first.fired,
            first.succeeded,
            first.failed,
            first.dead,
            first.retried
        ),
        (10, 8, 1, 1, 2)
    );
    assert_eq!(first.lateness.p50, Some(5));
    for empty in &stats.buckets[1..3] {
        assert_eq!(empty.fired, 0);
        assert_eq!(empty.lateness, Percentiles::default());
    }
    assert_eq!(stats.buckets[3].at, t("2026-11-28T09:58:00Z"));
    assert_eq!(stats.buckets[3].fired, 3);
    assert_eq!(stats.buckets[3].lateness.p99, Some(1_000));
    assert_eq!(stats.buckets[4].fired, 3);
    let totals = &stats.totals;
    assert_eq!(totals.fired, 16);
    assert_eq!(totals.retried, 2);
    assert_eq!(totals.dead, 1);
    assert_eq!(
        totals.by_state,
        StateCounts {
            scheduled: 2,
            dispatched: 0,
            acked: 3,
            succeeded: 8,
            failed: 1,
            dead: 1,
            cancelled: 1
        }
    );
    // 12 measured: 8 at <= 5, 3 at <= 20, 1 at <= 1000.
    assert_eq!(
        totals.lateness,
        Percentiles {
            p50: Some(5),
            p95: Some(1_000),
            p99: Some(1_000)
        }
    );
    // 16 runs over the 4 minutes from 09:55 to 09:59.
    assert_eq!(totals.fires_per_s, 0.067);
}

proptest! {
    #[test]
    fn percentiles_are_monotone_and_the_edge_of_the_true_value(
        samples in prop::collection::vec(0.0f64..120_000.0, 1..300)
    ) {
        let mut h = Histogram::default();
        for &ms in &samples {
            h.add(lateness_bucket(ms), 1);
        }
        let p = h.percentiles();
        let (p50, p95, p99) = (p.p50.unwrap(), p.p95.unwrap(), p.p99.unwrap());
        prop_assert!(p50 <= p95 && p95 <= p99);
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let lowest = bucket_value(lateness_bucket(sorted[0]));
        let highest = bucket_value(lateness_bucket(*sorted.last().unwrap()));
        for (percent, value) in [(50, p50), (95, p95), (99, p99)] {
            prop_assert!(lowest <= value && value <= highest);
            // Nearest rank of the raw samples: the percentile is its bucket's edge.
            let rank = (samples.len() as u64 * percent).div_ceil(100).max(1);
            let truth = sorted[rank as usize - 1];
            prop_assert_eq!(value, bucket_value(lateness_bucket(truth)));
            prop_assert!(truth <= f64::from(value) || lateness_bucket(truth) == LATENESS_BOUNDS_MS.len());
        }
    }
}
