//! WAL insertion as a VACUUM drives it, without the rest of VACUUM: one thread inserting
//! records that each carry a full-page image of a nearly full heap page (and two small
//! records beside each), a WAL writer thread woken when a megabyte is buffered (as the
//! engine's is), `fsync` off (as in `settle bench vacuum`), 16 MiB segments and 16 MiB of
//! `wal_buffers`. Prints, for each pass: the WAL written, elapsed time, the CPU time of the
//! inserting thread and of the writer, and how often the inserter found `wal_buffers` full and
//! wrote out itself.
//!
//! ```text
//! cargo run --release -p settledb --example wal_insert -- [MEGABYTES] [DIR]
//! ```
//!
//! Pass 1 writes MEGABYTES (default 800) into new segment files; then a checkpoint recycles
//! them; pass 2 writes as much again into the recycled files. DIR (default: a directory under
//! the system's temporary directory) is removed afterwards. A benchmark, not a test: it
//! asserts nothing and its figures depend on the machine.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use settledb::io::{FileSystem, NoSyncFs, RealFs};
use settledb::page::BLCKSZ;
use settledb::types::{BlockNumber, BufferTag, Fork, Lsn, Oid, Xid};
use settledb::wal::{self, BlockRef, RecordBuilder, Rmgr, Wal, WalConfig};

const SEGMENT: u64 = 16 << 20;

/// CPU time (user + system) of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: getrusage writes into the struct we pass and reads nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is valid on Linux.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A heap page as VACUUM logs it: full of tuples (a 120-byte hole), `pd_lsn` 0 so that every
/// change logs it whole.
fn heap_page(seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut p: Vec<u8> = (0..BLCKSZ)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    p[0..8].fill(0);
    p[12..14].copy_from_slice(&1180u16.to_le_bytes());
    p[14..16].copy_from_slice(&1300u16.to_le_bytes());
    p[1180..1300].fill(0);
    p
}

/// The WAL writer of `db::Inner`, reduced to what matters here.
struct Writer {
    wal: Arc<Wal>,
    mutex: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Writer {
    fn run(&self) -> Duration {
        loop {
            {
                let mut g = self.mutex.lock();
                if self.stop.load(Ordering::Acquire) {
                    return thread_cpu();
                }
                if self.wal.insert_lsn().0 - self.wal.flushed_lsn().0 < 1 << 20 {
                    self.wake.wait_for(&mut g, Duration::from_millis(200));
                }
            }
            self.wal.flush(self.wal.insert_lsn()).expect("WAL flush");
        }
    }
}

/// Inserts `bytes` of WAL the way a VACUUM does; returns the inserter's CPU time.
fn pass(wal: &Wal, pages: &[Vec<u8>], bytes: u64) -> Duration {
    let start_cpu = thread_cpu();
    let start = wal.insert_lsn();
    let mut block = 0u32;
    while wal.insert_lsn().0 - start.0 < bytes {
        let page = &pages[block as usize % pages.len()];
        let tag = BufferTag { rel: Oid(16384), fork: Fork::Main, block: BlockNumber(block) };
        let prune = RecordBuilder {
            toplevel_xid: settledb::Xid::INVALID,
            rmgr: Rmgr::Heap2,
            info: 0x10,
            xid: Xid::INVALID,
            blocks: vec![BlockRef {
                keep_data: false,
                id: 0,
                tag,
                will_init: false,
                page: Some(page),
                data: vec![0; 12],
            }],
            main_data: vec![0; 16],
        };
        wal.insert(&prune).expect("insert");
        for _ in 0..2 {
            let small = RecordBuilder {
                toplevel_xid: settledb::Xid::INVALID,
                rmgr: Rmgr::Heap2,
                info: 0x20,
                xid: Xid::INVALID,
                blocks: vec![BlockRef {
                    keep_data: false,
                    id: 0,
                    tag,
                    will_init: false,
                    page: None,
                    data: vec![0; 40],
                }],
                main_data: vec![0; 8],
            };
            wal.insert(&small).expect("insert");
        }
        block += 1;
    }
    thread_cpu() - start_cpu
}

fn main() {
    let mb: u64 = std::env::args().nth(1).map_or(800, |s| s.parse().expect("MEGABYTES is a number"));
    let dir = std::env::args()
        .nth(2)
        .map_or_else(|| std::env::temp_dir().join(format!("wal-insert-{}", std::process::id())), PathBuf::from);
    let fs: Arc<dyn FileSystem> = Arc::new(NoSyncFs(Arc::new(RealFs)));
    let config =
        WalConfig { segment_size: SEGMENT, full_page_writes: true, wal_buffers_bytes: 16 << 20, logical: false };
    let wal = Arc::new(Wal::open(fs, &dir, wal::first_lsn(SEGMENT), Lsn::INVALID, config).expect("open"));
    let writer = Arc::new(Writer { wal: wal.clone(), mutex: Mutex::new(()), wake: Condvar::new(), stop: false.into() });
    let w = Arc::downgrade(&writer);
    wal.set_writer_waker(Box::new(move || {
        if let Some(w) = w.upgrade() {
            let _g = w.mutex.lock();
            w.wake.notify_all();
        }
    }));
    let pages: Vec<Vec<u8>> = (0..64).map(heap_page).collect();
    for name in ["new segments", "recycled segments"] {
        let (full0, written0) = (wal::my_wal_buffers_full(), wal.insert_lsn());
        let t = Arc::clone(&writer);
        let writer_thread = std::thread::spawn(move || t.run());
        let start = Instant::now();
        let cpu = pass(&wal, &pages, mb << 20);
        wal.flush(wal.insert_lsn()).expect("flush");
        let elapsed = start.elapsed();
        writer.stop.store(true, Ordering::Release);
        {
            let _g = writer.mutex.lock();
            writer.wake.notify_all();
        }
        let writer_cpu = writer_thread.join().expect("writer thread");
        writer.stop.store(false, Ordering::Release);
        let bytes = wal.insert_lsn().0 - written0.0;
        println!(
            "{name:18} {:6.0} MB in {:6.3} s ({:4.2} GB/s): inserter CPU {:6.3} s, writer CPU {:6.3} s, \
             inserter wrote out {} times",
            bytes as f64 / 1e6,
            elapsed.as_secs_f64(),
            bytes as f64 / 1e9 / elapsed.as_secs_f64(),
            cpu.as_secs_f64(),
            writer_cpu.as_secs_f64(),
            wal::my_wal_buffers_full() - full0,
        );
        let redo = wal.begin_checkpoint();
        let done = wal.remove_old_segments(redo, wal::first_lsn(SEGMENT), 80 << 20, 20 << 30).expect("recycle");
        if name == "new segments" {
            println!("checkpoint: {} segments recycled, {} removed", done.recycled, done.removed);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
