//! Logical decoding (PostgreSQL's `src/backend/replication/logical` and `replication/slot.c`):
//! replication slots, the decoder that turns WAL into row changes, the reorder buffer that holds
//! them until their transaction commits, and the output plugins.
//!
//! Layering: this module sits above `wal`, `xact`, `heap` and `catalog` and below `db`. It never
//! reaches up: what lower layers must know about slots (the oldest WAL a slot still needs, the
//! `catalog_xmin` that holds back VACUUM) is pushed down into them as plain values.
//!
//! Built so far: [`message`] (logical messages in the WAL), [`reorderbuffer`] (changes held
//! per transaction until it commits, spilled or streamed past `logical_decoding_work_mem`),
//! [`logical`] (the decoder: WAL records in, committed or streamed transactions out to an
//! `OutputPlugin`), [`historic`] (what the decoder knows to read catalog rows as of a change's
//! LSN), [`test_decoding`] (PostgreSQL 15's test_decoding lines), [`pgoutput`] (PostgreSQL's
//! logical replication protocol, filtered by publications that `db` keeps in
//! `pg_publication` and hands over through [`pgoutput::PublicationLookup`]) and [`slot`]
//! (logical replication slots: durable positions, the WAL and catalog rows they keep; the
//! `Database` API is in `db/slots.rs`, the decoding sessions in `db/decoding.rs`, their
//! counters, `pg_stat_replication_slots`, in `db/pgstat.rs`). See docs/logical-decoding.md.

pub mod historic;
pub mod logical;
pub mod message;
pub mod null;
pub mod pgoutput;
pub mod reorderbuffer;
pub mod slot;
pub mod sqltypes;
pub mod test_decoding;
