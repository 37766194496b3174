//! Communicator creation end to end (run by `tests/comms.rs` with 1 to 8
//! ranks): context ids recycled over thousands of create/free cycles and
//! hundreds of communicators alive at once, non-blocking duplication in
//! orders that would hang one that waited, communicators from groups,
//! intercommunicators (point-to-point both ways, dup, split, merge),
//! Cartesian grids, and creations from three threads at once
//! (`MPI_THREAD_MULTIPLE`). Rank 0 prints `comm_suite ok` when every check held;
//! a failed check panics (the job fails).
//!
//! `oxmpirun -n 4 target/debug/examples/comm_suite`

use oxmpi::traits::*;
use oxmpi::{Communicator, Comparison, Threading};

type Comm<'u> = Communicator<'u, Threading::Multiple>;
type Universe = oxmpi::Universe<Threading::Multiple>;

/// A message around the ring of `c`: each rank sends `salt + rank`.
fn ring(c: &Comm<'_>, salt: i32) {
    let (r, n) = (c.rank(), c.size());
    let next = c.process_at_rank((r + 1) % n);
    let prev = c.process_at_rank((r + n - 1) % n);
    let mut got = -1;
    next.send_receive_into(&(salt + r), 5, &prev, &mut got, 5)
        .expect("ring");
    assert_eq!(got, salt + (r + n - 1) % n, "ring on a new communicator");
}

/// The same tag on each of `cs`, received in reverse order: each message
/// stays on its own communicator.
fn distinct(cs: &[Comm<'_>]) {
    let vals: Vec<i32> = (0..cs.len() as i32).collect();
    oxmpi::request::scope(|s| {
        let sends: Vec<_> = cs
            .iter()
            .zip(&vals)
            .map(|(c, v)| {
                c.process_at_rank((c.rank() + 1) % c.size())
                    .immediate_send_with_tag(s, v, 3)
                    .expect("isend")
            })
            .collect();
        for (i, c) in cs.iter().enumerate().rev() {
            let prev = c.process_at_rank((c.rank() + c.size() - 1) % c.size());
            let mut v = -1i32;
            prev.receive_into_with_tag(&mut v, 3).expect("receive");
            assert_eq!(v, i as i32, "communicator {i} received another's message");
        }
        oxmpi::request::wait_all(sends).expect("sends");
    });
}

fn cycles(world: &Comm<'_>) {
    // More than a 16-bit id space holds (each communicator takes two
    // ids) if ids were not recycled.
    let n = if world.size() <= 2 { 40_000 } else { 1_500 };
    for i in 0..n {
        let d = world.dup().expect("dup");
        if i % 256 == 0 {
            ring(&d, i);
        }
    }
    for i in 0..n / 10 {
        let s = world
            .split(Some((world.rank() % 2) as u32), world.rank())
            .expect("split")
            .expect("a color was given");
        if i % 64 == 0 {
            ring(&s, i);
        }
    }
    for _ in 0..n / 10 {
        let d = world
            .immediate_dup()
            .expect("idup")
            .wait()
            .expect("idup wait");
        assert_eq!(d.compare(world), Comparison::Congruent);
    }
}

fn alive(world: &Comm<'_>) {
    let mut cs: Vec<Comm<'_>> = Vec::new();
    for i in 0..300 {
        let parent = if i % 2 == 1 { &cs[i - 1] } else { world };
        let d = parent.dup().expect("dup");
        cs.push(d);
    }
    distinct(&cs);
    // Free every other one, then make as many again.
    let mut kept: Vec<Comm<'_>> = cs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, c)| c)
        .collect();
    for _ in 0..150 {
        kept.push(world.dup().expect("dup"));
    }
    distinct(&kept);
}

fn idup_orders(world: &Comm<'_>) {
    let trace = |what: &str| {
        if std::env::var_os("COMM_SUITE_TRACE").is_some() {
            eprintln!("rank {}: idup orders: {what}", world.rank());
        }
    };
    let (a, b, c) = (
        world.dup().unwrap(),
        world.dup().unwrap(),
        world.dup().unwrap(),
    );
    let even = world.rank() % 2 == 0;
    // Opposite orders on even and odd ranks.
    let (x, y) = if even {
        let x = a.immediate_dup().unwrap();
        (x, b.immediate_dup().unwrap())
    } else {
        let y = b.immediate_dup().unwrap();
        (a.immediate_dup().unwrap(), y)
    };
    trace("two started");
    let (y, x) = (y.wait().unwrap(), x.wait().unwrap());
    trace("two done");
    distinct(&[x, y]);
    trace("two distinct");
    // An idup and a blocking dup of another communicator, opposite orders.
    let (x, z) = if even {
        let z = c.dup().unwrap();
        (a.immediate_dup().unwrap(), z)
    } else {
        let x = a.immediate_dup().unwrap();
        (x, c.dup().unwrap())
    };
    trace("idup and dup");
    let x = x.wait().unwrap();
    distinct(&[x, z]);
    trace("many");
    // Many outstanding, completed by test loops.
    let mut pending: Vec<_> = (0..12).map(|_| a.immediate_dup().unwrap()).collect();
    let mut done: Vec<Option<Comm<'_>>> = (0..12).map(|_| None).collect();
    while done.iter().any(Option::is_none) {
        for (i, p) in pending.iter_mut().enumerate() {
            if done[i].is_none() {
                if let Some(r) = p.test() {
                    done[i] = Some(r.expect("idup"));
                }
            }
        }
    }
    trace("many done");
    let done: Vec<Comm<'_>> = done.into_iter().map(Option::unwrap).collect();
    distinct(&done);
    // Rank 0 synchronously sends after its idup; rank 1 receives first.
    if world.size() > 1 && world.rank() == 1 {
        let (v, _) = world.process_at_rank(0).receive::<i32>().unwrap();
        assert_eq!(v, 7);
        world.immediate_dup().unwrap().wait().unwrap();
    } else {
        let p = world.immediate_dup().unwrap();
        if world.size() > 1 && world.rank() == 0 {
            world
                .process_at_rank(1)
                .synchronous_send_with_tag(&7i32, 0)
                .unwrap();
        }
        p.wait().unwrap();
    }
}

fn groups(universe: &Universe, world: &Comm<'_>) {
    let g = world.group();
    let all = universe.comm_from_group(&g, "suite.all").unwrap();
    assert_eq!(all.compare(world), Comparison::Congruent);
    ring(&all, 1);
    let parity: Vec<u32> = (0..world.size() as u32)
        .filter(|r| r % 2 == world.rank() as u32 % 2)
        .collect();
    let mine = g.include(&parity).unwrap();
    let tag = if world.rank() % 2 == 0 {
        "suite.even"
    } else {
        "suite.odd"
    };
    let part = universe.comm_from_group(&mine, tag).unwrap();
    assert_eq!(part.rank(), world.rank() / 2);
    ring(&part, 2);
    // Set operations.
    let evens = g
        .include(&(0..g.size()).step_by(2).collect::<Vec<_>>())
        .unwrap();
    let odds = g.difference(&evens);
    assert_eq!(odds.size(), g.size() / 2);
    assert_eq!(evens.union(&odds).size(), g.size());
    assert_eq!(evens.intersection(&odds).size(), 0);
}

fn inter(universe: &Universe, world: &Comm<'_>) {
    let (r, n) = (world.rank(), world.size());
    let low = r < n / 2;
    let half = world.split(Some(low as u32), r).unwrap().unwrap();
    let ic = half
        .intercomm_create(0, world, if low { n / 2 } else { 0 }, 9)
        .unwrap();
    assert!(ic.is_inter());
    let remote: Vec<i32> = if low {
        (n / 2..n).collect()
    } else {
        (0..n / 2).collect()
    };
    assert_eq!(ic.remote_size(), Some(remote.len() as i32));
    assert_eq!(
        ic.remote_group().unwrap().world_ranks(),
        remote.iter().map(|&x| x as u32).collect::<Vec<_>>()
    );
    assert_eq!(ic.size(), half.size());
    let check_traffic = |ic: &Comm<'_>| {
        // Every rank to every remote rank, both ways.
        oxmpi::request::scope(|s| {
            let sends: Vec<_> = (0..remote.len() as i32)
                .map(|q| {
                    ic.process_at_rank(q)
                        .immediate_send_with_tag(s, &r, 4)
                        .unwrap()
                })
                .collect();
            for (q, &w) in remote.iter().enumerate() {
                let mut v = -1i32;
                let st = ic
                    .process_at_rank(q as i32)
                    .receive_into_with_tag(&mut v, 4)
                    .unwrap();
                assert_eq!((v, st.source_rank()), (w, q as i32));
            }
            for _ in 0..remote.len() {
                let mut v = -1i32;
                let st = ic
                    .any_process()
                    .receive_into_with_tag(&mut v, 6)
                    .expect("any source");
                assert_eq!(v, remote[st.source_rank() as usize]);
            }
            oxmpi::request::wait_all(sends).unwrap();
        });
    };
    // The ANY_SOURCE round needs its messages (tag 6) sent first.
    let send_tag6 = |ic: &Comm<'_>| {
        oxmpi::request::scope(|s| {
            let sends: Vec<_> = (0..remote.len() as i32)
                .map(|q| {
                    ic.process_at_rank(q)
                        .immediate_send_with_tag(s, &r, 6)
                        .unwrap()
                })
                .collect();
            oxmpi::request::wait_all(sends).unwrap();
        })
    };
    send_tag6(&ic);
    check_traffic(&ic);
    assert!(ic.process_at_rank(remote.len() as i32).send(&0i32).is_err());
    ic.barrier().unwrap();
    let d = ic.dup().unwrap();
    assert_eq!(d.compare(&ic), Comparison::Congruent);
    // Non-blocking across the groups: the lower leader synchronously
    // sends to the upper one after its idup, which receives first.
    let p = if r == n / 2 {
        let mut v = 0i32;
        world
            .process_at_rank(0)
            .receive_into_with_tag(&mut v, 2)
            .unwrap();
        ic.immediate_dup().unwrap()
    } else {
        let p = ic.immediate_dup().unwrap();
        if r == 0 {
            world
                .process_at_rank(n / 2)
                .synchronous_send_with_tag(&3i32, 2)
                .unwrap();
        }
        p
    };
    let e = p.wait().unwrap();
    assert!(e.is_inter());
    assert_eq!(e.compare(&ic), Comparison::Congruent);
    send_tag6(&e);
    check_traffic(&e);
    send_tag6(&d);
    check_traffic(&d);
    // Split by parity: the local and remote ranks of my parity.
    let same = |v: &[i32]| v.iter().filter(|&&w| w % 2 == r % 2).count() as i32;
    let locals: Vec<i32> = if low {
        (0..n / 2).collect()
    } else {
        (n / 2..n).collect()
    };
    match ic.split(Some((r % 2) as u32), r).unwrap() {
        Some(s) => {
            assert_eq!(
                (s.size(), s.remote_size()),
                (same(&locals), Some(same(&remote)))
            );
            oxmpi::request::scope(|sc| {
                let sends: Vec<_> = (0..same(&remote))
                    .map(|q| {
                        s.process_at_rank(q)
                            .immediate_send_with_tag(sc, &r, 6)
                            .unwrap()
                    })
                    .collect();
                oxmpi::request::wait_all(sends).unwrap();
            });
            let mut v = -1;
            if s.rank() == 0 {
                s.process_at_rank(0).send_with_tag(&r, 8).unwrap();
                s.process_at_rank(0)
                    .receive_into_with_tag(&mut v, 8)
                    .unwrap();
                assert_eq!(v % 2, r % 2);
            }
            for _ in 0..same(&remote) {
                s.any_process().receive_into_with_tag(&mut v, 6).unwrap();
                assert_eq!(v % 2, r % 2);
            }
        }
        None => assert_eq!(same(&remote), 0),
    }
    let merged = ic.merge(!low).unwrap();
    assert_eq!(merged.rank(), r, "merge with the lower group low");
    ring(&merged, 3);
    let merged = d.merge(low).unwrap();
    let expect = if low { r + (n - n / 2) } else { r - n / 2 };
    assert_eq!(merged.rank(), expect, "merge with the upper group low");
    // From groups.
    let g = world.group();
    let lo = g.include(&(0..n as u32 / 2).collect::<Vec<_>>()).unwrap();
    let hi = g
        .include(&(n as u32 / 2..n as u32).collect::<Vec<_>>())
        .unwrap();
    let (mine, other) = if low { (&lo, &hi) } else { (&hi, &lo) };
    let ic2 = universe
        .intercomm_from_groups(mine, 0, other, 0, "suite.inter")
        .unwrap();
    send_tag6(&ic2);
    check_traffic(&ic2);
    // A remote leader in the local group: every member fails, none hangs.
    let e = world.intercomm_create(0, world, 1, 5).unwrap_err();
    assert_eq!(e.class(), oxmpi::ErrorClass::Rank, "{e}");
    // Errors: an intracommunicator has no remote group and cannot merge.
    assert!(world.merge(false).is_err());
    assert!(world.remote_group().is_none());
}

fn cartesian(world: &Comm<'_>) {
    let mut dims = [0, 0];
    oxmpi::topology::dims_create(world.size(), &mut dims).unwrap();
    let g = world
        .create_cartesian_communicator(&dims, &[true, false], false)
        .unwrap()
        .expect("in the grid");
    let layout = g.get_layout();
    assert_eq!(layout.coords, g.rank_to_coordinates(g.rank()).unwrap());
    for q in 0..g.size() {
        let c = g.rank_to_coordinates(q).unwrap();
        assert_eq!(g.coordinates_to_rank(&c).unwrap(), q);
    }
    for dim in 0..2 {
        let (src, dst) = g.shift(dim, 1).unwrap();
        let to = dst.map_or(g.null_process(), |d| g.process_at_rank(d));
        let from = src.map_or(g.null_process(), |s| g.process_at_rank(s));
        let mut got = -1;
        to.send_receive_into(&g.rank(), 0, &from, &mut got, 0)
            .unwrap();
        assert_eq!(got, src.unwrap_or(-1));
    }
    let row = g.subgroup(&[false, true]).unwrap();
    assert_eq!(row.size(), dims[1]);
    assert_eq!(row.get_layout().coords, [layout.coords[1]]);
    assert!(world
        .create_cartesian_communicator(&[world.size() + 1], &[false], false)
        .is_err());
}

/// Blocking creations from several threads at once, each on its own
/// parent (concurrent agreements in one process take turns with the mask).
fn threads(world: &Comm<'_>) {
    let parents: Vec<Comm<'_>> = (0..3).map(|_| world.dup().unwrap()).collect();
    std::thread::scope(|sc| {
        for (t, p) in parents.iter().enumerate() {
            sc.spawn(move || {
                for i in 0..100 {
                    let d = p.dup().expect("dup from a thread");
                    if i % 10 == 0 {
                        ring(&d, t as i32 * 1000 + i);
                    }
                    let s = p
                        .split(Some((p.rank() % 2) as u32), 0)
                        .expect("split from a thread")
                        .expect("a color was given");
                    ring(&s, i);
                }
            });
        }
    });
}

fn main() {
    let universe = oxmpi::initialize_with_threading(Threading::Multiple).expect("MPI start-up");
    let world = universe.world();
    let trace = std::env::var_os("COMM_SUITE_TRACE").is_some();
    let step = |what: &str| {
        if trace {
            eprintln!("rank {}: {what}", world.rank());
        }
    };
    step("cycles");
    cycles(&world);
    step("alive");
    alive(&world);
    step("idup orders");
    idup_orders(&world);
    step("groups");
    groups(&universe, &world);
    if world.size() > 1 {
        step("intercommunicators");
        inter(&universe, &world);
    }
    step("cartesian");
    cartesian(&world);
    step("threads");
    threads(&world);
    world.barrier().unwrap();
    if world.rank() == 0 {
        println!("comm_suite ok");
    }
}
