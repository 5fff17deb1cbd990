//! The workspace's examples run as tests: each example's `run` is called and
//! what it reports is checked.

#[path = "../examples/balancer.rs"]
mod balancer;
#[path = "../examples/kv.rs"]
mod kv;
#[path = "../examples/search.rs"]
mod search;

#[test]
fn key_value_service() {
    let r = kv::run().unwrap();
    assert_eq!(r.keys, 1000, "1000 puts, one remove, one big value");
    assert!(r.big_value_ok);
    assert!(r.remote_get_us > 0.0 && r.local_get_us > 0.0);
}

#[test]
fn parallel_search_finds_the_optimum_and_multicasts_bounds() {
    let r = search::run().unwrap();
    assert_eq!(r.best, r.optimum);
    assert!(r.multicasts > 0, "workers multicast better bounds");
    assert!(r.explored > 0);
}

#[test]
fn load_balancer_gets_every_result_and_log_line() {
    let r = balancer::run().unwrap();
    assert_eq!(r.results, 120);
    assert_eq!(r.logged, 120, "every Immediate log line arrived");
    assert_eq!(r.per_node.values().sum::<u64>(), 120, "OnReturn stats add up");
    assert!(r.per_node.values().all(|&n| n > 0), "both nodes worked: {:?}", r.per_node);
}
