//! `settle inspect DIR page|index|vm|fsm NAME [BLOCK]`: one page of a table, an index or a
//! table's maps, or, for `vm` and `fsm` without a block, a summary of the whole map.
//!
//! * `vm TABLE`: how many heap pages the visibility map calls all-visible and all-frozen
//!   (what `pg_visibility_map_summary` returns), out of the table's pages.
//! * `fsm TABLE`: the free space recorded for each heap page (`pg_freespace`'s `avail`, the
//!   category times 32 bytes), one line per page up to [`FSM_LIST_MAX_PAGES`] pages; a larger
//!   table gets a histogram of pages by recorded free space in 1 KB steps instead.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use settledb::fsm::CAT_STEP;
use settledb::types::Fork;
use settledb::{Database, Table};

/// Tables up to this many pages get one FSM line per page; larger ones a histogram.
pub const FSM_LIST_MAX_PAGES: u32 = 100;

pub fn run(dir: PathBuf, what: &str, name: &str, block: Option<u32>) -> Result<ExitCode> {
    crate::require_data_dir(&dir)?;
    if !matches!(what, "page" | "index" | "vm" | "fsm") {
        bail!("settle inspect: unknown object {what:?} (expected page, index, vm or fsm)");
    }
    // An inspection tool starts no maintenance of its own: autovacuum stays off.
    let config = crate::config_for_dir(&dir, &["autovacuum=off".to_string()])?;
    let db = Database::open(&dir, config)?;
    let out = render(&db, what, name, block);
    // Close cleanly whether or not the rendering worked; its error is the one to report.
    let closed = db.close();
    let out = out?;
    closed?;
    print!("{out}");
    if !out.ends_with('\n') {
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

fn render(db: &Database, what: &str, name: &str, block: Option<u32>) -> Result<String> {
    let need_block = || block.with_context(|| format!("settle inspect {what} needs a BLOCK number"));
    Ok(match what {
        "page" => match block {
            Some(b) => db.describe_page(&db.table(name)?, b, true)?,
            None => {
                // Every page of the table, as pageinspect over generate_series(0, relpages - 1).
                let t = db.table(name)?;
                let mut out = String::new();
                for b in 0..db.table_pages(&t)? {
                    out.push_str(&format!("block {b}:\n{}", db.describe_page(&t, b, true)?));
                }
                out
            }
        },
        "index" => db.describe_index_page(&db.index(name)?, need_block()?)?,
        "vm" => match block {
            Some(b) => db.describe_map_page(&db.table(name)?, Fork::Vm, b)?,
            None => vm_summary(db, &db.table(name)?)?,
        },
        _ => match block {
            Some(b) => db.describe_map_page(&db.table(name)?, Fork::Fsm, b)?,
            None => fsm_summary(db, &db.table(name)?)?,
        },
    })
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// `pg_visibility_map_summary`, with the table's size for scale.
fn vm_summary(db: &Database, t: &Table) -> Result<String> {
    let pages = u64::from(db.table_pages(t)?);
    let (visible, frozen) = db.vm_summary(t)?;
    Ok(format!(
        "visibility map of \"{}\": {pages} heap pages\nall_visible: {visible} ({:.2}%)\nall_frozen:  {frozen} ({:.2}%)\n",
        t.name(),
        pct(visible, pages),
        pct(frozen, pages)
    ))
}

/// `pg_freespace` for a small table; a histogram of `avail` for a large one.
fn fsm_summary(db: &Database, t: &Table) -> Result<String> {
    let cats = db.fsm_categories(t)?;
    let avail = |c: u8| usize::from(c) * CAT_STEP;
    let total: usize = cats.iter().map(|&c| avail(c)).sum();
    let mut s = format!(
        "free space map of \"{}\": {} heap pages, {total} bytes free recorded, {} pages with none recorded\n",
        t.name(),
        cats.len(),
        cats.iter().filter(|&&c| c == 0).count()
    );
    if cats.len() <= FSM_LIST_MAX_PAGES as usize {
        s.push_str(&format!("{:>8} {:>6}\n", "blkno", "avail"));
        for (b, &c) in cats.iter().enumerate() {
            s.push_str(&format!("{b:>8} {:>6}\n", avail(c)));
        }
        return Ok(s);
    }
    // Buckets: nothing recorded, then 1 KB steps (32 categories each), then a whole empty page.
    let mut counts = [0u64; 10];
    for &c in &cats {
        let i = match c {
            0 => 0,
            255 => 9,
            c => 1 + usize::from(c) / 32,
        };
        counts[i] += 1;
    }
    s.push_str(&format!("{:>13} {:>10}\n", "avail", "pages"));
    for (i, n) in counts.iter().enumerate() {
        let label = match i {
            0 => "0".to_string(),
            9 => format!("{}", avail(255)),
            i => {
                let lo = ((i - 1) * 32).max(1);
                let hi = (i * 32 - 1).min(254);
                format!("{}-{}", avail(lo as u8), avail(hi as u8))
            }
        };
        s.push_str(&format!("{label:>13} {n:>10}\n"));
    }
    Ok(s)
}
