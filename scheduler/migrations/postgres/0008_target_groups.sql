-- The groups jobs target, for the dead-letter sampler that every node runs every 15 s:
-- read with a skip scan of this index (one probe per group), where `SELECT DISTINCT`
-- read the whole table, about 0.4 s per call with a million jobs. A fire does not change
-- `settings`, so it stays a HOT update.
CREATE INDEX jobs_target_group ON jobs ((settings->'target'->>'group'));
