// Package migrations holds ferry's own schema, as numbered SQL files embedded
// in the binary, and the Migrator that applies River's migrations
// (rivermigrate) followed by ferry's.
//
// # Files
//
// Each version is a pair NNN_name.up.sql and NNN_name.down.sql, numbered from
// 001 without gaps. Each file runs in a transaction of its own together with
// the row it adds to (or removes from) ferry_migration.
//
// # Concurrency
//
// A run holds the session advisory lock 8110731 (LockKey) on one connection
// from start to end, so two `worker migrate up` processes, or two replicas
// started with --migrate, take turns: the second finds nothing left to do.
//
// # Down
//
// Down reverts ferry's migrations newest first, then River's. Reverting
// everything (steps < 0) leaves the database without ferry's or River's
// tables, and without their data.
//
// # Module
//
// migrations is a Go module of its own (github.com/ferryq/ferry/migrations),
// like the packages a service imports to write (jobs, outbox, seal, locks,
// broadcast): it requires River and pgx, never the worker's modules.
package migrations
