-- The groups jobs target, for the dead-letter sampler that runs every 15 s: read with a
-- skip scan of this index (one probe per group), where `SELECT DISTINCT` read the whole
-- table.
CREATE INDEX jobs_target_group ON jobs (json_extract(settings, '$.target.group'));
