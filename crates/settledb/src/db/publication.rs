//! CREATE / ALTER / DROP PUBLICATION on the [`Database`] (PostgreSQL's `publicationcmds.c`),
//! kept in the `pg_publication` catalog relation (see [`crate::catalog::publication`]).
//!
//! Every command runs in a transaction of its own under the catalog's DDL lock, like the other
//! DDL: it reads the committed rows, then replaces (deletes and inserts) the one row it
//! changes, so a crash leaves the old or the new publication and recovery needs nothing of
//! its own. The first CREATE PUBLICATION creates `pg_publication` itself in its transaction.
//! DROP TABLE removes the table from every publication listing it, in the drop's transaction
//! (PostgreSQL drops the `pg_publication_rel` rows through their dependency).
//!
//! Decoding sessions read the rows with the historic snapshot the decoder builds
//! ([`PublicationLookup`]), not with these commands' snapshots.

use std::sync::Arc;

use super::{startup, Database, Inner, Transaction};
use crate::catalog::publication::{
    pg_publication_schema, PublicationRow, PublicationTables, PublishActions, PG_PUBLICATION_OID,
};
use crate::catalog::{self, ClassRow, RelKind, TableEntry};
use crate::decode::pgoutput::PublicationLookup;
use crate::error::{Error, Result};
use crate::heap::{self, Relation};
use crate::types::{BlockNumber, Fork, Oid, Tid};
use crate::xact::Snapshot;

/// What CREATE PUBLICATION publishes: `FOR ALL TABLES` or `FOR TABLE a, b`.
#[derive(Clone, Copy, Debug)]
pub enum PublicationTarget<'a> {
    AllTables,
    Tables(&'a [&'a str]),
}

impl Database {
    /// `CREATE PUBLICATION name [FOR ALL TABLES | FOR TABLE …] WITH (publish = …)`.
    pub fn create_publication(&self, name: &str, target: PublicationTarget<'_>, actions: PublishActions) -> Result<()> {
        catalog::validate_name(name)?;
        let inner = &self.inner;
        let _ddl = inner.catalog.ddl_lock.lock();
        let existing = self.read_publications()?;
        if existing.iter().any(|(_, p)| p.name == name) {
            return Err(Error::AlreadyExists(format!("publication \"{name}\" already exists")));
        }
        let tables = match target {
            PublicationTarget::AllTables => PublicationTables::All,
            PublicationTarget::Tables(names) => {
                let mut oids = Vec::with_capacity(names.len());
                for t in names {
                    let oid = self.publishable_table(t)?;
                    if oids.contains(&oid) {
                        return Err(Error::invalid(format!(
                            "relation \"{t}\" is already member of publication \"{name}\""
                        )));
                    }
                    oids.push(oid);
                }
                oids.sort();
                PublicationTables::Some(oids)
            }
        };
        let row = PublicationRow { oid: inner.catalog.allocate_oid(), name: name.to_string(), tables, actions };
        let (rel, created) = match inner.catalog.get_by_oid(PG_PUBLICATION_OID) {
            Some(e) => (e.rel.clone(), None),
            None => {
                if inner.catalog.name_taken("pg_publication") {
                    return Err(Error::AlreadyExists("relation \"pg_publication\" already exists".into()));
                }
                let rel = Relation::new(
                    PG_PUBLICATION_OID,
                    "pg_publication",
                    PG_PUBLICATION_OID,
                    pg_publication_schema(),
                    100,
                );
                (Arc::new(rel), Some(class_row()))
            }
        };
        let mut tx = self.begin()?;
        let class_tid = match &created {
            None => None,
            Some(class) => {
                tx.ensure_xid()?;
                startup::log_create(&inner.wal, inner.pool.smgr(), PG_PUBLICATION_OID, Fork::Main)?;
                // As CREATE TABLE's: no XID older than the oldest running one can be in it.
                let class = ClassRow { relfrozenxid: inner.xact.oldest_xmin(), ..class.clone() };
                let pg_class = inner.catalog.get("pg_class").ok_or_else(|| Error::NotFound("pg_class".into()))?;
                Some((tx.insert_raw(&pg_class.rel, &class.to_values())?, class))
            }
        };
        let result = tx.insert_raw(&rel, &row.to_values()).and_then(|_| tx.commit());
        if let Err(e) = result {
            if created.is_some() {
                let _ = inner.pool.drop_relation_buffers(PG_PUBLICATION_OID, None, BlockNumber(0));
                let _ = inner.pool.smgr().unlink(PG_PUBLICATION_OID);
            }
            return Err(e);
        }
        if let Some((tid, class)) = class_tid {
            inner.catalog.publish(&class, tid, inner.xact.next_full_xid());
        }
        Ok(())
    }

    /// `DROP PUBLICATION name`.
    pub fn drop_publication(&self, name: &str) -> Result<()> {
        let _ddl = self.inner.catalog.ddl_lock.lock();
        let (tid, _) = self.find_publication(name)?;
        let rel = self.pg_publication()?;
        let mut tx = self.begin()?;
        delete_row(&mut tx, &rel.rel, tid, name)?;
        tx.commit()
    }

    /// `ALTER PUBLICATION name ADD TABLE …`.
    pub fn alter_publication_add_tables(&self, name: &str, tables: &[&str]) -> Result<()> {
        self.alter_publication_tables(name, tables, true)
    }

    /// `ALTER PUBLICATION name DROP TABLE …`.
    pub fn alter_publication_drop_tables(&self, name: &str, tables: &[&str]) -> Result<()> {
        self.alter_publication_tables(name, tables, false)
    }

    /// `ALTER PUBLICATION name SET (publish = …)`.
    pub fn alter_publication_set_publish(&self, name: &str, actions: PublishActions) -> Result<()> {
        let _ddl = self.inner.catalog.ddl_lock.lock();
        let (tid, mut row) = self.find_publication(name)?;
        row.actions = actions;
        self.replace_publication(tid, &row)
    }

    /// The publications as of now, by name.
    pub fn publications(&self) -> Result<Vec<PublicationRow>> {
        let mut v: Vec<PublicationRow> = self.read_publications()?.into_iter().map(|(_, p)| p).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    fn alter_publication_tables(&self, name: &str, tables: &[&str], add: bool) -> Result<()> {
        let _ddl = self.inner.catalog.ddl_lock.lock();
        let (tid, mut row) = self.find_publication(name)?;
        let PublicationTables::Some(oids) = &mut row.tables else {
            return Err(Error::invalid(format!(
                "publication \"{name}\" is defined as FOR ALL TABLES; DETAIL: Tables cannot be added to or dropped \
                 from FOR ALL TABLES publications."
            )));
        };
        for t in tables {
            let oid = self.publishable_table(t)?;
            match (oids.binary_search(&oid), add) {
                (Ok(_), true) => {
                    return Err(Error::AlreadyExists(format!(
                        "relation \"{t}\" is already member of publication \"{name}\""
                    )))
                }
                (Err(at), true) => oids.insert(at, oid),
                (Ok(at), false) => {
                    oids.remove(at);
                }
                (Err(_), false) => {
                    return Err(Error::NotFound(format!("relation \"{t}\" is not part of the publication")))
                }
            }
        }
        self.replace_publication(tid, &row)
    }

    /// A user table's OID, or PostgreSQL's error for a missing or system relation.
    fn publishable_table(&self, name: &str) -> Result<Oid> {
        let e = self
            .inner
            .catalog
            .get(name)
            .ok_or_else(|| Error::NotFound(format!("relation \"{name}\" does not exist")))?;
        if crate::xact::horizon::is_catalog_relation(e.rel.oid) {
            return Err(Error::invalid(format!(
                "cannot add relation \"{name}\" to publication; DETAIL: This operation is not supported for system \
                 tables."
            )));
        }
        Ok(e.rel.oid)
    }

    fn find_publication(&self, name: &str) -> Result<(Tid, PublicationRow)> {
        self.read_publications()?
            .into_iter()
            .find(|(_, p)| p.name == name)
            .ok_or_else(|| Error::NotFound(format!("publication \"{name}\" does not exist")))
    }

    fn replace_publication(&self, tid: Tid, row: &PublicationRow) -> Result<()> {
        let rel = self.pg_publication()?;
        let mut tx = self.begin()?;
        delete_row(&mut tx, &rel.rel, tid, &row.name)?;
        tx.insert_raw(&rel.rel, &row.to_values())?;
        tx.commit()
    }

    fn pg_publication(&self) -> Result<Arc<TableEntry>> {
        self.inner.catalog.get_by_oid(PG_PUBLICATION_OID).ok_or_else(|| Error::NotFound("pg_publication".into()))
    }

    /// Every committed publication row (the caller holds the DDL lock, under which alone
    /// publications change).
    fn read_publications(&self) -> Result<Vec<(Tid, PublicationRow)>> {
        let snap = self.inner.xact.get_snapshot(None);
        scan_publications(&self.inner, &snap)
    }

    /// Takes `table` out of every publication listing it, in `tx` (DROP TABLE's).
    pub(crate) fn unpublish_table(&self, tx: &mut Transaction<'_>, table: Oid) -> Result<()> {
        for (tid, mut row) in self.read_publications()? {
            let PublicationTables::Some(oids) = &mut row.tables else { continue };
            let Ok(at) = oids.binary_search(&table) else { continue };
            oids.remove(at);
            let rel = self.pg_publication()?;
            delete_row(tx, &rel.rel, tid, &row.name)?;
            tx.insert_raw(&rel.rel, &row.to_values())?;
        }
        Ok(())
    }
}

fn delete_row(tx: &mut Transaction<'_>, rel: &Relation, tid: Tid, name: &str) -> Result<()> {
    if !tx.delete_raw(rel, tid)? {
        return Err(Error::invalid(format!("publication \"{name}\" is being changed by another transaction")));
    }
    Ok(())
}

/// The `pg_class` row of `pg_publication`.
fn class_row() -> ClassRow {
    ClassRow {
        oid: PG_PUBLICATION_OID,
        relname: "pg_publication".to_string(),
        relfilenode: PG_PUBLICATION_OID,
        relpages: 0,
        reltuples: -1.0,
        relfrozenxid: crate::types::Xid::FIRST_NORMAL,
        relminmxid: 1,
        fillfactor: 100,
        schema: pg_publication_schema(),
        kind: RelKind::Table,
        index: None,
        options: Default::default(),
        replica_identity: Default::default(),
        missing: Vec::new(),
    }
}

/// The `pg_publication` rows `snap` sees (none when the relation was never created).
fn scan_publications(inner: &Inner, snap: &Snapshot) -> Result<Vec<(Tid, PublicationRow)>> {
    let Some(e) = inner.catalog.get_by_oid(PG_PUBLICATION_OID) else { return Ok(Vec::new()) };
    let env = inner.env();
    let oldest = inner.xact.catalog_oldest_xmin();
    let nblocks = inner.pool.smgr().nblocks(PG_PUBLICATION_OID, Fork::Main)?;
    let mut ring = crate::buffer::Ring::new(256 << 10);
    let mut out = Vec::new();
    for b in 0..nblocks {
        for (tid, vals) in heap::scan_page(&env, &e.rel, snap, u32::MAX, BlockNumber(b), oldest, &mut ring)? {
            out.push((tid, PublicationRow::from_values(&vals, tid)?));
        }
    }
    Ok(out)
}

/// The publications a decoding session reads, through the decoder's historic snapshot.
pub(crate) struct DbPublications(pub(crate) Arc<Inner>);

impl PublicationLookup for DbPublications {
    fn publications(&self, snapshot: &Snapshot) -> Result<Vec<PublicationRow>> {
        Ok(scan_publications(&self.0, snapshot)?.into_iter().map(|(_, p)| p).collect())
    }
}
