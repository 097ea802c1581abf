-- Retention: finished runs older than `run_retention` are deleted in small batches, oldest
-- first. Each batch is a range scan of this index, however many runs the table holds. A
-- `dead` run whose dead letter is still pending keeps its `due_at` and is not in it.
CREATE INDEX runs_finished ON runs (finished_at)
    WHERE state IN ('succeeded', 'dead') AND due_at IS NULL;
