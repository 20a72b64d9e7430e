//! Logical decoding (PostgreSQL's `src/backend/replication/logical` and `replication/slot.c`):
//! replication slots, the decoder that turns WAL into row changes, the reorder buffer that holds
//! them until their transaction commits, and the output plugins.
//!
//! Layering: this module sits above `wal`, `xact`, `heap` and `catalog` and below `db`. It never
//! reaches up: what lower layers must know about slots (the oldest WAL a slot still needs, the
//! `catalog_xmin` that holds back VACUUM) is pushed down into them as plain values.
//!
//! Built so far: [`message`] (logical messages in the WAL), [`reorderbuffer`] (changes held
//! per transaction until it commits) and [`slot`] (logical replication slots: durable
//! positions, the WAL and catalog rows they keep; the `Database` API is in `db/slots.rs`).
//! The decoder and the output plugins come next.

pub mod message;
pub mod reorderbuffer;
pub mod slot;
