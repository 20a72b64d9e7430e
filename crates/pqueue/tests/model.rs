//! Model test: the indexed heap against a trivially correct oracle (a map from handle to entry,
//! searched linearly for the top), over seeded random sequences of push, pop, update, remove,
//! peek and `for_each_top`, for both orders. Small key ranges make ties frequent; stale handles
//! (of removed entries, whose slots get reused) are kept and tried again, and must change
//! nothing. The heap's own invariants (`validate`) are checked after every step.

use std::collections::HashMap;

use pqueue::{Handle, IndexedHeap, Order};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The top key of the oracle, as the heap's order defines it.
fn oracle_top(oracle: &HashMap<Handle, (i32, u64)>, order: Order) -> Option<i32> {
    let keys = oracle.values().map(|(k, _)| *k);
    match order {
        Order::Min => keys.min(),
        Order::Max => keys.max(),
    }
}

fn run(seed: u64, order: Order, steps: usize, key_range: i32) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut heap: IndexedHeap<i32, u64> = IndexedHeap::new(order);
    let mut oracle: HashMap<Handle, (i32, u64)> = HashMap::new();
    let mut stale: Vec<Handle> = Vec::new();
    let mut next_value = 0u64;
    for step in 0..steps {
        let live: Vec<Handle> = oracle.keys().copied().collect();
        let pick = |rng: &mut StdRng| live[rng.gen_range(0..live.len())];
        match rng.gen_range(0..100) {
            0..=39 => {
                let k = rng.gen_range(-key_range..=key_range);
                let h = heap.push(k, next_value);
                assert!(oracle.insert(h, (k, next_value)).is_none(), "push returned a live handle");
                next_value += 1;
            }
            40..=54 => {
                let top = oracle_top(&oracle, order);
                let got = heap.pop();
                assert_eq!(got.map(|(k, _)| k), top, "seed {seed} step {step}: pop");
                if let Some((k, v)) = got {
                    let h = *oracle.iter().find(|(_, e)| **e == (k, v)).expect("popped entry is in the oracle").0;
                    oracle.remove(&h);
                    stale.push(h);
                }
            }
            55..=74 if !live.is_empty() => {
                let h = pick(&mut rng);
                let k = rng.gen_range(-key_range..=key_range);
                let old = oracle.get_mut(&h).expect("live");
                assert_eq!(heap.update(h, k), Some(old.0));
                old.0 = k;
            }
            75..=87 if !live.is_empty() => {
                let h = pick(&mut rng);
                assert_eq!(heap.remove(h), oracle.remove(&h));
                stale.push(h);
            }
            88..=93 if !stale.is_empty() => {
                let h = stale[rng.gen_range(0..stale.len())];
                assert_eq!(heap.update(h, 0), None, "stale handle updated something");
                assert_eq!(heap.remove(h), None, "stale handle removed something");
                assert!(heap.get(h).is_none() && !heap.contains(h));
            }
            _ => {
                // Every entry at or before a bound, against a filter of the oracle.
                let bound = rng.gen_range(-key_range..=key_range);
                let at_top = |k: &i32| match order {
                    Order::Min => *k <= bound,
                    Order::Max => *k >= bound,
                };
                let mut got: Vec<(Handle, i32)> = Vec::new();
                heap.for_each_top(at_top, |h, k, _| got.push((h, *k)));
                let mut want: Vec<(Handle, i32)> =
                    oracle.iter().filter(|(_, (k, _))| at_top(k)).map(|(h, (k, _))| (*h, *k)).collect();
                let key = |x: &(Handle, i32)| (x.1, format!("{:?}", x.0));
                got.sort_by_key(key);
                want.sort_by_key(key);
                assert_eq!(got, want, "seed {seed} step {step}: for_each_top({bound})");
            }
        }
        heap.validate().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        assert_eq!(heap.len(), oracle.len());
        assert_eq!(heap.peek().map(|(_, k, _)| *k), oracle_top(&oracle, order), "seed {seed} step {step}: peek");
        if let Some((h, k, v)) = heap.peek() {
            assert_eq!(oracle.get(&h), Some(&(*k, *v)), "peek's handle names its entry");
        }
        for (h, (k, v)) in oracle.iter().take(3) {
            assert_eq!(heap.get(*h), Some((k, v)));
        }
    }
}

#[test]
fn min_heap_agrees_with_the_oracle() {
    for seed in 0..40 {
        run(seed, Order::Min, 2_000, if seed % 2 == 0 { 5 } else { 1_000_000 });
    }
}

#[test]
fn max_heap_agrees_with_the_oracle() {
    for seed in 100..140 {
        run(seed, Order::Max, 2_000, if seed % 2 == 0 { 5 } else { 1_000_000 });
    }
}

#[test]
fn values_can_change_in_place_without_moving() {
    let mut heap: IndexedHeap<u32, String> = IndexedHeap::new_max();
    let a = heap.push(3, "a".into());
    let b = heap.push(9, "b".into());
    heap.value_mut(a).expect("live").push('!');
    assert_eq!(heap.get(a), Some((&3, &"a!".to_string())));
    assert_eq!(heap.peek().map(|(h, _, _)| h), Some(b));
    heap.clear();
    assert!(heap.is_empty() && heap.get(b).is_none());
}
