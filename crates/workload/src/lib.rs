//! Seeded database workloads that run the same transactions on the embedded engine and on
//! PostgreSQL.
//!
//! A workload is written once, against a small driver trait per workload
//! ([`tpcc::TpccConn`], [`pgbench::PgbenchConn`]); each target implements the trait: over
//! settledb's Rust API ([`tpcc::embedded`], [`pgbench::Embedded`]) and over PostgreSQL's wire
//! protocol with the same SQL a SQL driver would send ([`tpcc::postgres`],
//! [`pgbench::PgTarget`]). Inputs are drawn by the workload from one seeded RNG per terminal,
//! so the same seed sends the same requests to every target and every freeze policy.
//!
//! - [`tpcc`]: TPC-C-like, with BenchmarkSQL's schema, indexes, fillfactors and deferred
//!   Delivery (the workload of seed 000).
//! - [`pgbench`]: pgbench's TPC-B-like and select-only scripts, and an append-only one.
//! - [`aging`]: one flag that scales every XID-age parameter, so that days of XID aging fit in
//!   minutes.
//! - [`observe`]: what a run samples from its target (pg_stat_database, pg_stat_user_tables,
//!   relfrozenxid ages, WAL) in a form common to both targets, behind the
//!   [`observe::Observer`] trait; [`observe_pg`] reads PostgreSQL's views and server log.
//! - [`pg`]: the PostgreSQL boundary (connections, COPY, decimals, timestamps, retryable
//!   errors).

pub mod aging;
pub mod observe;
pub mod observe_pg;
pub mod pg;
pub mod pgbench;
pub mod rng;
pub mod tpcc;
pub mod vacuum_log;
