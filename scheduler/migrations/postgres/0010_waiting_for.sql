-- Why a `dispatched` run's ack deadline was moved on without using an attempt: 'consumer'
-- while its work queue had no consumer (issue 34 §4). Cleared when the run is dispatched
-- again; meaningful only while the run is `dispatched`. Nullable, so nothing is rewritten.
ALTER TABLE runs ADD COLUMN waiting_for text;
