-- Overlap `buffer_one` (issue 38): its unfinished runs hold back its fires like `forbid`
-- ones, so `runs_unfinished` now indexes both; and a held fire (`waiting_for =
-- 'previous'`, no due_at) is found by the reconciler's release through `runs_held`.
DROP INDEX runs_unfinished;
CREATE INDEX runs_unfinished ON runs (job_id)
    WHERE overlap IN ('forbid', 'buffer_one') AND state IN ('scheduled', 'dispatched', 'acked', 'failed');

CREATE INDEX runs_held ON runs (job_id) WHERE waiting_for = 'previous';
