//! Updates and deletes: the row-lock protocol around a tuple version (PostgreSQL's
//! `heap_update`/`heap_delete` and the READ COMMITTED re-check of `EvalPlanQual`).
//!
//! One attempt locks the old version's page exclusively and asks
//! [`visibility::satisfies_update`]. What happens next is an [`Attempt`]: done; wait for the
//! transaction that holds the row and try again; follow `t_ctid` to a newer committed version
//! (READ COMMITTED; REPEATABLE READ fails with a serialization error instead); or, for an
//! update whose new version does not fit on the page, pick a page with room without holding
//! any lock and try again with both pages locked in block order, so two updaters can never
//! deadlock on page locks. The driver loops are [`update`] and [`delete`].

use super::*;

/// What the caller must do after one attempt at an update or delete.
enum Attempt {
    Finished(ModifyResult),
    WaitFor(Xid),
    Follow(Tid),
    /// The new version (`need` bytes, MAXALIGNed) fits neither on the old page nor on the
    /// other page tried: pick a page with that much room and try again.
    NeedsOtherPage {
        need: usize,
    },
}

/// Deletes the row version at `tid` (following the update chain under READ COMMITTED).
pub fn delete(
    env: &HeapEnv<'_>,
    rel: &Relation,
    tx: &TxContext<'_>,
    tid: Tid,
    wait: &dyn Fn(Xid) -> Result<()>,
) -> Result<ModifyResult> {
    let mut tid = tid;
    loop {
        match delete_once(env, rel, tx, tid)? {
            Attempt::Finished(r) => return Ok(r),
            Attempt::WaitFor(x) => wait(x)?,
            Attempt::Follow(next) => tid = next,
            Attempt::NeedsOtherPage { .. } => unreachable!("delete stays on its page"),
        }
    }
}

fn check_update_status(tx: &TxContext<'_>, st: UpdateStatus, tid: Tid) -> Result<Option<Attempt>> {
    Ok(match st {
        UpdateStatus::Ok => None,
        UpdateStatus::Invisible | UpdateStatus::SelfUpdated => Some(Attempt::Finished(ModifyResult::Gone)),
        UpdateStatus::BeingUpdated(x) => Some(Attempt::WaitFor(x)),
        UpdateStatus::Updated { ctid, .. } => {
            if tx.serializable_updates {
                return Err(Error::SerializationFailure);
            }
            if ctid == tid {
                Some(Attempt::Finished(ModifyResult::Gone))
            } else {
                Some(Attempt::Follow(ctid))
            }
        }
    })
}

fn delete_once(env: &HeapEnv<'_>, rel: &Relation, tx: &TxContext<'_>, tid: Tid) -> Result<Attempt> {
    if tid.block.0 >= env.pool.smgr().nblocks(rel.relfilenode, Fork::Main)? {
        return Ok(Attempt::Finished(ModifyResult::Gone));
    }
    let buf = read_page(env, rel, tid.block, None)?;
    let mut g = buf.write();
    let Some(t) = normal_item(rel, &g.0, tid)? else { return Ok(Attempt::Finished(ModifyResult::Gone)) };
    let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
    let st = visibility::satisfies_update(&h, tid, tx.snapshot, env.xact)?;
    if let Some(a) = check_update_status(tx, st, tid)? {
        return Ok(a);
    }
    let (m, m2) = wal::xmax_masks(h.infomask(), h.infomask2(), false);
    clear_all_visible(env, rel, tid.block, &mut g.0)?;
    wal::apply_xmax(&mut g.0, tid.offset, tx.xid, tx.cid, m, m2, tid);
    let mut main = Vec::with_capacity(16);
    main.extend_from_slice(&tid.offset.0.to_le_bytes());
    main.extend_from_slice(&tx.xid.0.to_le_bytes());
    main.extend_from_slice(&m.to_le_bytes());
    main.extend_from_slice(&m2.to_le_bytes());
    push_old_row(env, rel, &mut main, page::item(&g.0, tid.offset), None)?;
    let lsn =
        log_one_block(env, Rmgr::Heap, XLOG_HEAP_DELETE, Some(tx), rel.tag(tid.block), false, &g.0, Vec::new(), main)?;
    page::set_lsn(&mut g.0, lsn);
    buf.mark_dirty();
    Ok(Attempt::Finished(ModifyResult::Done(tid)))
}

/// Updates the row version at `tid` to the values `f` computes from the current version
/// (re-run on the newest version when READ COMMITTED follows a concurrent update).
pub fn update(
    env: &HeapEnv<'_>,
    rel: &Relation,
    tx: &TxContext<'_>,
    tid: Tid,
    f: &mut dyn FnMut(&[Value]) -> Result<Vec<Value>>,
    wait: &dyn Fn(Xid) -> Result<()>,
) -> Result<ModifyResult> {
    let mut tid = tid;
    let mut other_page: Option<BlockNumber> = None;
    loop {
        match update_once(env, rel, tx, tid, f, other_page)? {
            Attempt::Finished(r) => return Ok(r),
            Attempt::WaitFor(x) => wait(x)?,
            Attempt::Follow(next) => tid = next,
            Attempt::NeedsOtherPage { need } => {
                // Pick a page with room for the new version (its size as computed by the
                // attempt, not the old version's: asking for less could return the same page
                // forever), without holding the old page's lock.
                // The map may offer the old page itself when it gained room meanwhile; the
                // next attempt then finds that the version fits there.
                let t = find_target(env, rel, need, None, None)?;
                other_page = Some(t.block());
            }
        }
    }
}

fn update_once(
    env: &HeapEnv<'_>,
    rel: &Relation,
    tx: &TxContext<'_>,
    tid: Tid,
    f: &mut dyn FnMut(&[Value]) -> Result<Vec<Value>>,
    other_page: Option<BlockNumber>,
) -> Result<Attempt> {
    if tid.block.0 >= env.pool.smgr().nblocks(rel.relfilenode, Fork::Main)? {
        return Ok(Attempt::Finished(ModifyResult::Gone));
    }
    let old_buf = read_page(env, rel, tid.block, None)?;
    // Make room on the old page first when its dead versions can go (the new version then
    // usually fits there and the update is HOT).
    maybe_prune(env, rel, &old_buf, tx.horizon)?;
    let new_buf = match other_page {
        Some(b) if b != tid.block => Some(read_page(env, rel, b, None)?),
        _ => None,
    };
    // Lock in block order.
    let (mut og, mut ng) = match &new_buf {
        Some(nb) if nb.block() < tid.block => {
            let n = nb.write();
            (old_buf.write(), Some(n))
        }
        Some(nb) => {
            let o = old_buf.write();
            (o, Some(nb.write()))
        }
        None => (old_buf.write(), None),
    };
    let Some(t) = normal_item(rel, &og.0, tid)? else { return Ok(Attempt::Finished(ModifyResult::Gone)) };
    let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
    let st = visibility::satisfies_update(&h, tid, tx.snapshot, env.xact)?;
    if let Some(a) = check_update_status(tx, st, tid)? {
        return Ok(a);
    }
    let old_vals = rel.deform(t).map_err(|e| corrupt_tuple(rel, tid, &e))?;
    let (old_m, old_m2) = (h.infomask(), h.infomask2());
    let new_vals = f(&old_vals)?;
    let mut nt = tuple::form_tuple(&rel.schema, &new_vals)?;
    let need = page::maxalign(nt.len());
    let indexed_change =
        rel.indexed_columns.read().iter().zip(old_vals.iter().zip(&new_vals)).any(|(&ix, (a, b))| ix && a != b);
    let fits_here = page::heap_free_space(&og.0) >= need;
    let hot = fits_here && !indexed_change;
    let (new_block, new_page_fresh) = if fits_here {
        (tid.block, false)
    } else {
        match (&new_buf, ng.as_deref_mut()) {
            (Some(nb), Some(np)) => {
                let fresh = page::is_new(&np.0);
                if fresh {
                    page::init(&mut np.0, 0);
                }
                if page::heap_free_space(&np.0) < need {
                    return Ok(Attempt::NeedsOtherPage { need });
                }
                (nb.block(), fresh && page::max_offset(&np.0) == 0)
            }
            _ => return Ok(Attempt::NeedsOtherPage { need }),
        }
    };
    let same_page = new_block == tid.block;
    stamp_new_tuple(&mut nt, tx, HEAP_UPDATED, if hot { HEAP_ONLY_TUPLE } else { 0 });
    // Both pages are locked (in block order); the map pages come after them.
    clear_all_visible(env, rel, tid.block, &mut og.0)?;
    if !same_page {
        clear_all_visible(env, rel, new_block, &mut ng.as_deref_mut().expect("locked").0)?;
    }
    let target_page: &mut [u8] = if same_page { &mut og.0 } else { &mut ng.as_deref_mut().expect("locked").0 };
    let new_off = first_free_offset(target_page).unwrap_or(OffsetNumber(page::max_offset(target_page) + 1));
    let new_tid = Tid { block: new_block, offset: new_off };
    tuple::set_ctid(&mut nt, new_tid);
    if !wal::apply_insert(target_page, new_off, &nt) {
        return Err(corrupt_tuple(rel, new_tid, "page reported room for the new version but refused it"));
    }
    // Under wal_level = logical the old row (or its key) is logged: keep it before the page
    // changes (its header does, its data does not; a copy is simplest).
    let old_tuple = if env.wal.logical() { page::item(&og.0, tid.offset).to_vec() } else { Vec::new() };
    let (m, m2) = wal::xmax_masks(old_m, old_m2, hot);
    wal::apply_xmax(&mut og.0, tid.offset, tx.xid, tx.cid, m, m2, new_tid);

    let mut main = Vec::with_capacity(20);
    main.extend_from_slice(&tid.offset.0.to_le_bytes());
    main.extend_from_slice(&tx.xid.0.to_le_bytes());
    main.extend_from_slice(&m.to_le_bytes());
    main.extend_from_slice(&m2.to_le_bytes());
    main.extend_from_slice(&new_off.0.to_le_bytes());
    main.push(if new_page_fresh { FLAG_INIT_PAGE } else { 0 });
    push_old_row(env, rel, &mut main, &old_tuple, Some(&new_vals))?;
    let mut data = Vec::with_capacity(nt.len());
    wal::encode_tuple(&mut data, &nt);
    let lsn = {
        let keep_data = env.wal.logical();
        let mut blocks = Vec::with_capacity(2);
        if same_page {
            blocks.push(BlockRef {
                keep_data,
                id: 0,
                tag: rel.tag(new_block),
                will_init: false,
                page: Some(&og.0[..]),
                data,
            });
        } else {
            let np = &ng.as_deref().expect("locked").0;
            blocks.push(BlockRef {
                keep_data,
                id: 0,
                tag: rel.tag(new_block),
                will_init: new_page_fresh,
                page: Some(&np[..]),
                data,
            });
            blocks.push(BlockRef {
                keep_data: false,
                id: 1,
                tag: rel.tag(tid.block),
                will_init: false,
                page: Some(&og.0[..]),
                data: Vec::new(),
            });
        }
        let rec = RecordBuilder {
            toplevel_xid: logged_toplevel_xid(env, tx),
            rmgr: Rmgr::Heap,
            info: if hot { XLOG_HEAP_HOT_UPDATE } else { XLOG_HEAP_UPDATE },
            xid: tx.xid,
            blocks,
            main_data: main,
        };
        env.wal.insert(&rec)?
    };
    page::set_lsn(&mut og.0, lsn);
    old_buf.mark_dirty();
    if let (Some(nb), Some(np)) = (&new_buf, ng.as_deref_mut()) {
        if !same_page {
            page::set_lsn(&mut np.0, lsn);
            nb.mark_dirty();
        }
    }
    Ok(Attempt::Finished(ModifyResult::Updated { tid: new_tid, hot, values: new_vals }))
}
