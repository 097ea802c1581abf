-- Cancelling a run (POST /v1/runs/{id}/cancel): the new final state `cancelled`, and who
-- cancelled the run (the API token's name; `finished_at` says when).
ALTER TABLE runs ADD COLUMN cancelled_by text;

-- Retention deletes cancelled runs like succeeded ones: the index gains the state. Its
-- predicate and the prune query's (`finished_runs!` in `store/sql.rs`) stay the same text.
DROP INDEX IF EXISTS runs_finished;
CREATE INDEX runs_finished ON runs (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled') AND due_at IS NULL;
