-- Back to the server's autovacuum settings for river_job.
ALTER TABLE river_job RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
