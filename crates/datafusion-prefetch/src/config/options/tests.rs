use super::*;

#[test]
fn every_key_round_trips_through_set_and_entries() {
    let mut options = PrefetchOptions::default();
    for (key, value) in [
        ("policy", "batched"),
        ("memory_budget", "1GiB"),
        ("read_ahead_window", "64MiB"),
        ("read_ahead_window", "auto"),
        ("file_open_depth", "8"),
        ("file_open_depth", "auto"),
        ("eager_first_read_cap", "0"),
        ("eager_first_read_cap", "auto"),
        ("request_timeout", "30s"),
        ("request_timeout", "250ms"),
        ("request_timeout", "off"),
        ("hedge_after", "80ms"),
        ("hedge_after", "off"),
        ("hedge_after", "auto"),
        ("hedge_share", "10%"),
        ("hedge_share", "100%"),
        ("memory_limit", "2GiB"),
        ("memory_limit", "auto"),
    ] {
        options.set_key(key, value).unwrap();
        let entry = options
            .entries()
            .into_iter()
            .find(|e| e.key == format!("prefetch.{key}"))
            .unwrap();
        assert_eq!(entry.value.as_deref(), Some(value));
    }
}

#[test]
fn refusals_name_the_key_and_what_it_accepts() {
    let cases = [
        (
            "policy",
            "bogus",
            "accepted values: off, batched, pipelined, streaming, auto",
        ),
        ("read_ahead_window", "-1", "prefetch.read_ahead_window"),
        ("read_ahead_window", "0", "at least 1 byte"),
        ("memory_budget", "lots", "prefetch.memory_budget"),
        (
            "read_ahead_window",
            "1GiB",
            "must not exceed prefetch.memory_budget",
        ),
        ("file_open_depth", "-2", "prefetch.file_open_depth"),
        ("file_open_depth", "100000", "from 0 to 256"),
        ("request_timeout", "soon", "expected off or e.g. 500ms"),
        ("request_timeout", "5h", "prefetch.request_timeout"),
        ("hedge_after", "soon", "expected auto, off or e.g. 80ms"),
        ("hedge_share", "0%", "a percentage from 1% to 100%"),
        ("hedge_share", "101", "prefetch.hedge_share"),
        ("hedge_share", "half", "prefetch.hedge_share"),
        (
            "eager_first_read_cap",
            "1.5",
            "prefetch.eager_first_read_cap",
        ),
        ("memory_limit", "0", "at least 1 byte"),
        ("memory_limit", "much", "prefetch.memory_limit"),
        ("nope", "1", "unknown setting 'prefetch.nope'"),
    ];
    for (key, value, expected) in cases {
        let mut options = PrefetchOptions::default();
        let err = options.set_key(key, value).unwrap_err().to_string();
        assert!(err.contains(expected), "{key}={value}: {err}");
        assert_eq!(options, PrefetchOptions::default(), "unchanged on error");
    }
}

#[test]
fn window_larger_than_budget_is_refused_in_either_order() {
    let mut options = PrefetchOptions::default();
    // With the window left to the policy, any budget goes.
    options.set_key("memory_budget", "1MiB").unwrap();
    options.set_key("memory_budget", "256MiB").unwrap();
    assert!(options.set_key("read_ahead_window", "1GiB").is_err());
    options.set_key("memory_budget", "2GiB").unwrap();
    options.set_key("read_ahead_window", "1GiB").unwrap();
    assert!(options.set_key("memory_budget", "512MiB").is_err());
    options.set_key("read_ahead_window", "AUTO").unwrap();
    options.set_key("memory_budget", "512MiB").unwrap();
    assert_eq!(options.read_ahead_window(), None);
}

#[derive(Debug)]
struct Fixed(ByteSize);
impl LimitSource for Fixed {
    fn limit(&self) -> ByteSize {
        self.0
    }
}

#[test]
fn an_attached_limit_is_shown_live_and_refused_by_set() {
    let mut options = PrefetchOptions::default();
    options.set_key("memory_limit", "2GiB").unwrap();
    assert_eq!(options.memory_limit(), Some(ByteSize::mib(2048)));
    options.attach(Arc::new(Fixed(ByteSize::mib(300))));
    let shown = options
        .entries()
        .into_iter()
        .find(|e| e.key == "prefetch.memory_limit")
        .unwrap();
    assert_eq!(shown.value.as_deref(), Some("300MiB"));
    let err = options
        .set_key("memory_limit", "1GiB")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("shared by every session on this runtime (300MiB now)"),
        "{err}"
    );
    // The other keys are still set as usual.
    options.set_key("policy", "off").unwrap();
}
