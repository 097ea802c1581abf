-- Pause on failure (issue 38): why the scheduler paused a job itself, shown as
-- `paused_reason`; NULL for a running job or one a user paused.
ALTER TABLE jobs ADD COLUMN paused_reason TEXT;
